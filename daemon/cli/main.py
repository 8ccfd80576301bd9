"""`ckpt`'s entry point: runs the group and is the one place that turns errors into exit codes.

Commands raise (`core.errors`: each class carries its exit code, `EXIT_CODES` is the table);
only `main` exits. Heavy libraries are imported inside commands: `ckpt list` never imports h5py
or TensorFlow, `ckpt best` neither SQLAlchemy's ORM nor rich."""

from __future__ import annotations

import io
import sys
from typing import NoReturn

import click

from ..core.errors import CkptError, UsageError
from .group import all_commands, main_group
from .output import echo

__all__ = ["all_commands", "main", "main_group", "run"]

INTERRUPTED = 130
BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left


def main(argv: list[str] | None = None) -> NoReturn:
    sys.exit(run(sys.argv[1:] if argv is None else argv))


def run(args: list[str]) -> int:
    """Run `ckpt ARGS`; the exit code of how it ended. With --debug, an unexpected error is
    raised with its traceback instead of summarized."""
    ctx: click.Context | None = None
    try:
        _refuse_undecodable(args)
        ctx = main_group.make_context("ckpt", list(args))
        with ctx:
            main_group.invoke(ctx)
        sys.stdout.flush()  # a reader gone is found here, not by the interpreter's last flush
    except BrokenPipeError:  # `ckpt list | head`: the reader has what it wanted
        _stdout_to_devnull()
        return BROKEN_PIPE
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt, EOFError):
        echo("ckpt: aborted", err=True)
        return INTERRUPTED
    except click.ClickException as exc:
        shown = io.StringIO()
        exc.show(file=shown)  # it repeats what was typed: an ESC in an option name too
        for line in shown.getvalue().splitlines():
            echo(line, err=True)
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except CkptError as exc:
        if str(exc):
            echo(f"ckpt: error: {exc}", err=True)
        return exc.exit_code
    except Exception as exc:
        if _debug(ctx):
            raise
        echo(f"ckpt: unexpected error: {type(exc).__name__}: {exc}", err=True)
        return 1
    return 0


def _stdout_to_devnull() -> None:
    """What is still buffered for a closed pipe goes nowhere, quietly: Python's own flush at
    exit would otherwise print "Exception ignored ... BrokenPipeError" (its documented recipe,
    `signal` module's "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout file descriptor to replace
        pass


def _debug(ctx: click.Context | None) -> bool:
    """Whether `-v`/`--debug` was given, as click parsed it (not a word anywhere in argv)."""
    return ctx is not None and bool(ctx.params.get("debug"))


def _refuse_undecodable(args: list[str]) -> None:
    """Python hands bytes that are not UTF-8 over as lone surrogates, which no catalog query
    can carry (the catalog holds UTF-8 names only; a scan reports such files by name)."""
    for arg in args:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            raise UsageError(f"argument {arg!r} is not valid UTF-8: rename the file, or use its id")
