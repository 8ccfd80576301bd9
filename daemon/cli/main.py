"""The `ckpt` command: a thin skin over `api`. The cli layer is the only one that prints or exits.

Heavy libraries are imported inside commands: `ckpt list` never imports h5py or TensorFlow.
Exit codes: 0 ok, 1 unexpected error, 2 usage or config error, 3 some items failed,
4 lease held by another process, 5 catalog schema behind (run `ckpt db upgrade`), 6 not found.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from ..api import Catalog
    from ..core.model import Checkpoint

EXIT_CODES = """Exit codes: 0 ok, 1 unexpected error, 2 usage or config error, 3 some items
failed, 4 lease held by another process, 5 catalog schema behind (run `ckpt db upgrade`),
6 not found."""


class Context:
    def __init__(self, config_path: str | None, database: str | None, debug: bool) -> None:
        self.config_path, self.database, self.debug = config_path, database, debug
        self._config: Any = None

    def catalog(self) -> Catalog:
        from ..api import open_catalog

        with self.new_catalog_notice():
            return open_catalog(self.config_path, self.database)

    def config(self) -> Any:
        """The config in use (loaded once); with --debug, one stderr line says which."""
        if self._config is None:
            from ..settings import config

            self._config = config.load(self.config_path, database_override=self.database)
            if self.debug:
                from ..catalog.db import shown_url

                shown = shown_url(self._config.database)
                _echo(f"ckpt: config {self._config.source}, catalog {shown}", err=True)
        return self._config

    @contextlib.contextmanager
    def new_catalog_notice(self, *, up_front: bool = False) -> Iterator[None]:
        """Say once (stderr) when what runs inside creates a new SQLite catalog: a command run
        from an unexpected folder otherwise quietly starts an empty one. `up_front`: the
        service runs for days, so it says so before it starts, not when it stops."""
        from ..settings.config import sqlite_file

        config = self.config()
        path = sqlite_file(config.database)
        path = None if path is None or path.exists() else path
        where = f"at {path} (config: {config.source})"
        if path is not None and up_front:
            _echo(f"ckpt: creating a new catalog {where}", err=True)
        yield
        if path is not None and not up_front and path.exists():
            _echo(f"ckpt: created a new catalog {where}", err=True)

    def validated_config(self, path: str | None) -> Any:
        """What `config check` accepts is what `serve` starts with: the file's validation and
        the catalog URL's (dialect, driver), refused with the key path before anything runs."""
        from ..catalog import db as database
        from ..settings import config

        if path == self.config_path:
            loaded = self.config()
        else:
            loaded = config.load(path, database_override=self.database)
        database.check_url(loaded.database)
        return loaded


pass_context = click.make_pass_decorator(Context)
MAX_LIMIT = 2**63 - 1  # what an SQL LIMIT takes


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="Config file. Default: $CKPT_CONFIG, else the first of ./config.yaml, "
    "$XDG_CONFIG_HOME/ckpt/config.yaml (~/.config/ckpt/...), /etc/ckpt/config.yaml, else the "
    "built-in one.",
)
@click.option(
    "--db",
    "database",
    metavar="URL",
    help="Catalog SQLAlchemy URL; overrides $CKPT_DB and the config's `database`.",
)
@click.option(
    "-v",
    "--debug",
    is_flag=True,
    help="Say which config and catalog are in use; debug logs; tracebacks on errors.",
)
@click.version_option(package_name="ckpt-daemon", prog_name="ckpt")
@click.pass_context
def main_group(
    ctx: click.Context, config_path: str | None, database: str | None, debug: bool
) -> None:
    """Index, query and manage ML training checkpoints.

    The config is the file named by --config or $CKPT_CONFIG (which must exist), else the first
    found of ./config.yaml, $XDG_CONFIG_HOME/ckpt/config.yaml (default ~/.config/ckpt/),
    /etc/ckpt/config.yaml, else the built-in default. `ckpt status` and --debug say which
    config and catalog are in use; a command that creates a new catalog says so on stderr.

    \b
    Example:
      ckpt scan && ckpt list --run exp1 --sort val_loss
      python predict.py --weights "$(ckpt best --metric val_loss)"
    """
    ctx.obj = Context(config_path, database, debug)


def _echo(line: str, *, err: bool = False) -> None:
    """One line of text for a person: names in it are shown, never obeyed (see render.visible)."""
    from ..core.render import visible

    click.echo(visible(line), err=err)


def _json(doc: Any) -> None:
    # Indented for a person at a terminal; compact (and C-encoded: fast) for a script.
    click.echo(json.dumps(doc, indent=2 if sys.stdout.isatty() else None))


def _json_rows(rows: Iterable[dict[str, Any]]) -> None:
    """A JSON array, one compact row per line: fast (C encoder) and still greppable."""
    out = sys.stdout
    out.write("[")
    for i, row in enumerate(rows):
        out.write(",\n" if i else "\n")
        out.write(json.dumps(row))
    out.write("\n]\n")


def _table(columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..core.render import visible

    # On a terminal, columns are cut to fit; into a pipe, each row stays one whole line.
    tty = sys.stdout.isatty()
    table = Table(box=None, pad_edge=False, header_style="bold" if tty else None)
    for name in columns:
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for row in rows:
        # Text cells: a name like `a[/]b` or `[red]x` is data, never rich markup or an emoji code.
        table.add_row(*(Text(visible(cell)) for cell in row))
    Console(width=None if tty else 100_000, highlight=False).print(table)


def _progress() -> tuple[Callable[[str], None] | None, Callable[[], None]]:
    """A live counter on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from ..core.render import visible

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.completed} checked  {task.description}", markup=False),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task("", total=None)
    progress.start()

    def advance(path: str) -> None:
        progress.update(task, advance=1, description=visible(path[-60:]))

    return advance, progress.stop


@main_group.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the scan report as JSON.")
@pass_context
def scan(obj: Context, paths: tuple[str, ...], as_json: bool) -> None:
    """Index checkpoints now: PATHS (inside configured roots), or every root.

    Unchanged files are not read again; changed ones are re-indexed; vanished ones are
    marked missing. Exits 3 when some checkpoints are corrupt or unreadable.

    \b
    Example:  ckpt scan runs/exp1 --json
    """
    from ..logs import setup

    setup("debug" if obj.debug else "warning")
    advance, stop = _progress()
    with obj.catalog() as cat:
        try:
            report = cat.scan(paths, progress=advance)
        finally:
            stop()
    if as_json:
        _json(report.as_dict())
    else:
        _echo(
            f"{len(report.indexed)} indexed, {report.unchanged} unchanged, "
            f"{len(report.incomplete)} incomplete, {len(report.failed)} failed, "
            f"{len(report.missing)} missing, {len(report.skipped)} skipped"
        )
        for path, status, reason in report.failed:
            _echo(f"  {status}: {path}: {reason}", err=True)
        for problem in report.errors:
            _echo(f"  error: {problem}", err=True)
    if report.failed or report.errors:
        sys.exit(3)


@main_group.command(name="list")
@click.option("--run", help="Only this run (its folder relative to its root).")
@click.option("--format", "fmt", help="Only this format, e.g. keras-v3-zip, keras-legacy-h5.")
@click.option("--status", help="Only this status: ok, incomplete, corrupt, unreadable, missing.")
@click.option("--kind", help="Only this kind: full, weights.")
@click.option(
    "--where",
    multiple=True,
    metavar="EXPR",
    help="NAME OP VALUE with OP in < <= > >= == != over metrics and epoch, step, "
    "size, n_params; repeat to AND them.",
)
@click.option(
    "--sort",
    default="mtime",
    show_default=True,
    help="A column (epoch, step, size, mtime, id, path) or a metric name.",
)
@click.option("--desc", is_flag=True, help="Sort descending.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_LIMIT), help="At most N rows.")
@click.option("--json", "as_json", is_flag=True, help="JSON array of checkpoint objects.")
@pass_context
def list_command(
    obj: Context,
    run: str | None,
    fmt: str | None,
    status: str | None,
    kind: str | None,
    where: tuple[str, ...],
    sort: str,
    desc: bool,
    limit: int | None,
    as_json: bool,
) -> None:
    """List catalogued checkpoints.

    \b
    Example:  ckpt list --run exp1 --where "val_loss < 0.3" --sort val_loss --limit 5
    """
    from ..core.views import checkpoint_json

    with obj.catalog() as cat:
        rows = cat.list(
            run=run,
            where=where,
            sort=sort,
            desc=desc,
            limit=limit,
            format=fmt,
            status=status,
            kind=kind,
        )
    if as_json:
        _json_rows(checkpoint_json(c) for c in rows)
        return
    _table(
        ["ID", "RUN", "CHECKPOINT", "FORMAT", "EPOCH", "SIZE", "OPTIMIZER", "STATUS", "METRICS"],
        [_list_row(c) for c in rows],
    )


def _list_row(c: Checkpoint) -> list[str]:
    from ..core.render import metric_text
    from ..core.units import format_size

    name = c.path[len(c.root) :].lstrip("/") if c.path.startswith(c.root) else c.path
    epoch = str(c.epoch) if c.epoch is not None else (f"s{c.step}" if c.step is not None else "")
    shown = "  ".join(f"{k}={metric_text(v)}" for k, v in sorted(c.metrics.items()))
    status = c.status.value if c.status.value == "ok" else f"{c.status.value}: {c.reason or ''}"
    return [
        str(c.id),
        c.run,
        name,
        c.format or "-",
        epoch,
        format_size(c.size_bytes),
        c.optimizer or "-",
        status,
        shown,
    ]


@main_group.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="JSON object with layers, configs, events.")
@pass_context
def show(obj: Context, ref: str, as_json: bool) -> None:
    """Everything known about one checkpoint. REF is a catalog id or a path.

    \b
    Example:  ckpt show runs/exp1/weights.07-0.23.hdf5
    """
    from ..core.views import checkpoint_json

    with obj.catalog() as cat:
        doc = checkpoint_json(cat.get(ref), detailed=True)
    if as_json:
        _json(doc)
        return
    from ..core.render import show_text

    click.echo(show_text(doc))


@main_group.command()
@click.option("--metric", required=True, help="Metric name, e.g. val_loss.")
@click.option(
    "--mode",
    type=click.Choice(["min", "max"]),
    help="Default: max for acc/auc/precision/recall/f1 metrics, else min.",
)
@click.option("--run", help="Only this run.")
@click.option(
    "--artifact",
    type=click.Choice(["inference"]),
    help="Print the best checkpoint's inference artifact instead (see `ckpt split`).",
)
@click.option("--json", "as_json", is_flag=True, help="The checkpoint as a JSON object.")
@pass_context
def best(
    obj: Context,
    metric: str,
    mode: str | None,
    run: str | None,
    artifact: str | None,
    as_json: bool,
) -> None:
    """The best `ok` checkpoint by a metric. Prints its path alone (exit 6 if none).

    \b
    Example:  python eval.py --weights "$(ckpt best --metric val_loss --run exp1)"
    """
    from ..core.views import checkpoint_json

    with obj.catalog() as cat:
        found = cat.best(metric, mode, run)
        if artifact:
            found = cat.get(found.id)
    if as_json:
        _json(checkpoint_json(found, detailed=bool(artifact)))
    elif artifact:
        _echo(_artifact_path(found, artifact))
    else:
        _echo(found.path)


def _artifact_path(found: Checkpoint, kind: str) -> str:
    from ..core.errors import NotFound

    for item in found.details.get("artifacts") or []:
        if item["kind"] == kind:
            return str(item["path"])
    raise NotFound(
        f"the best checkpoint {found.path} has no {kind} artifact: run `ckpt split {found.id}`"
    )


@main_group.command()
@click.option("--json", "as_json", is_flag=True, help="JSON array of run objects.")
@pass_context
def runs(obj: Context, as_json: bool) -> None:
    """Runs (folders holding checkpoints) with counts, bytes, newest and best checkpoints.

    \b
    Example:  ckpt runs --json
    """
    from ..core.units import format_size
    from ..core.views import run_json

    with obj.catalog() as cat:
        found = cat.runs()
    if as_json:
        _json([run_json(r) for r in found])
        return
    _table(
        ["RUN", "ROOT", "CHECKPOINTS", "SIZE", "NEWEST"],
        [
            [r.name, r.root, str(r.checkpoints), format_size(r.bytes), r.newest or "-"]
            for r in found
        ],
    )


def main(argv: list[str] | None = None) -> NoReturn:
    from ..core.errors import CkptError

    args = sys.argv[1:] if argv is None else argv
    debug = "-v" in args or "--debug" in args
    try:
        _refuse_undecodable(args)
        main_group.main(args=args, prog_name="ckpt", standalone_mode=False)
    except click.exceptions.Abort:
        _echo("ckpt: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        shown = io.StringIO()
        exc.show(file=shown)  # it repeats what was typed: an ESC in an option name too
        for line in shown.getvalue().splitlines():
            _echo(line, err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except CkptError as exc:
        _echo(f"ckpt: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        _echo(f"ckpt: unexpected error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    sys.exit(0)


def _refuse_undecodable(args: list[str]) -> None:
    """Python hands bytes that are not UTF-8 over as lone surrogates, which no catalog query
    can carry (the catalog holds UTF-8 names only; a scan reports such files by name)."""
    from ..core.errors import UsageError

    for arg in args:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            raise UsageError(f"argument {arg!r} is not valid UTF-8: rename the file, or use its id")


# The other commands live in their own modules; importing registers them.
from . import admin, artifacts, retention  # noqa: E402, F401  (registers their commands)
