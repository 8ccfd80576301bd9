"""The CLI reference page (docs/cli.md), written from every command's `--help`, so it cannot go
stale: `python -m ckpt_daemon.cli.reference [PAGE]` rewrites it (default `docs/cli.md` under the
working folder: run it from the repository's root), and tests/e2e/test_cli_reference.py fails
while the committed page differs from `reference()`.

The help is rendered at a fixed width, whatever the terminal: the page must be the same on every
machine."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .group import all_commands, main_group

# What click prints on a terminal of 80 columns or more (its default `max_content_width` is 80,
# less two columns of margin); narrower terminals wrap sooner.
WIDTH = 78
PAGE = Path("docs/cli.md")
COMMAND = "python3 -m ckpt_daemon.cli.reference"

HEADER = f"""# CLI reference

Every `ckpt` command and subcommand with its `--help`, exactly as `ckpt ... --help` prints it
on a terminal of 80 columns or more. This page is generated: do not edit it by hand; after
changing a help text or an option, run `{COMMAND}` from the repository's root (the test suite
fails while the page is stale). What the JSON documents, statuses and exit codes mean, and
which of them are a stable contract: [Commands: the CLI contract](cli-contract.md).
"""


def help_of(name: str) -> str:
    """`ckpt NAME --help` ("" for the group itself), at WIDTH columns."""
    settings = {**main_group.context_settings, "terminal_width": WIDTH}
    ctx = click.Context(main_group, info_name="ckpt", **settings)
    command: click.Command = main_group
    for word in name.split():
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, word)
        assert found is not None, f"no command {name!r}"
        command = found
        ctx = click.Context(command, info_name=word, parent=ctx, **command.context_settings)
    return command.get_help(ctx)


def reference() -> str:
    """The page: the group's help, then each command's, in `ckpt --help`'s order."""
    names = ["", *(name for name, _command in all_commands())]
    parts = [HEADER]
    for name in names:
        title = f"ckpt {name}".strip()
        parts.append(f"## {title}\n\n```text\n{help_of(name).rstrip()}\n```\n")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    page = Path(argv[0]) if argv else PAGE
    if not page.parent.is_dir():
        click.echo(f"{page.parent}/ does not exist: run this from the repository's root", err=True)
        return 2
    text = reference()
    with click.open_file(str(page), "w", encoding="utf-8", atomic=True) as out:
        out.write(text)
    click.echo(f"{page}: {len(names_in(text))} commands")
    return 0


def names_in(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ckpt")]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
