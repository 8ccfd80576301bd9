"""What the CLI prints: escaped text lines, JSON documents, tables and a progress counter.

Every byte the `ckpt` command writes goes through here. rich is imported only when a table or a
terminal progress bar is drawn: `ckpt best` and `ckpt list --json` never load it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click


def echo(line: str, *, err: bool = False) -> None:
    """One line of text for a person: names in it are shown, never obeyed (see render.visible)."""
    from ..core.render import visible

    click.echo(visible(line), err=err)


def emit_json(doc: Any) -> None:
    # Indented for a person at a terminal; compact (and C-encoded: fast) for a script.
    click.echo(json.dumps(doc, indent=2 if sys.stdout.isatty() else None))


def emit_json_rows(rows: Iterable[dict[str, Any]]) -> None:
    """A JSON array, one compact row per line: fast (C encoder) and still greppable."""
    out = sys.stdout
    out.write("[")
    for i, row in enumerate(rows):
        out.write(",\n" if i else "\n")
        out.write(json.dumps(row))
    out.write("\n]\n")


def table(columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..core.render import visible

    # On a terminal, columns are cut to fit; into a pipe, each row stays one whole line.
    tty = sys.stdout.isatty()
    grid = Table(box=None, pad_edge=False, header_style="bold" if tty else None)
    for name in columns:
        grid.add_column(name, no_wrap=True, overflow="ellipsis")
    for row in rows:
        # Text cells: a name like `a[/]b` or `[red]x` is data, never rich markup or an emoji code.
        grid.add_row(*(Text(visible(cell)) for cell in row))
    Console(width=None if tty else 100_000, highlight=False).print(grid)


def progress() -> tuple[Callable[[str], None] | None, Callable[[], None]]:
    """A live counter on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from ..core.render import visible

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.completed} checked  {task.description}", markup=False),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("", total=None)
    bar.start()

    def advance(path: str) -> None:
        bar.update(task, advance=1, description=visible(path[-60:]))

    return advance, bar.stop
