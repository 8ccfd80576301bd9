"""What the CLI prints: escaped text lines, JSON documents, tables and a progress counter.

Every byte the `ckpt` command writes goes through here. Tables are laid out by core.table (no
rich: a cell is never markup); rich is imported only for the progress bar on a terminal."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..core.table import Column


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


def terminal_width() -> int | None:
    """Columns of the terminal stdout is, or None for a pipe or file (a table is never cut)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def table(
    columns: list[Column],
    rows: list[list[str]],
    *,
    before: dict[int, list[str]] | None = None,
    after: dict[int, list[str]] | None = None,
) -> None:
    """A table fitted to the terminal (see core.table). `before` / `after`: lines printed
    before / after the row of that index (the root the next rows are in, a run's best
    checkpoints). Every cell and line is shown through `visible`: a name is data, never
    markup or terminal control."""
    from ..core.render import visible
    from ..core.table import layout

    width = terminal_width()
    laid = layout(columns, [[visible(cell) for cell in row] for row in rows], width)
    bold = width is not None and not os.environ.get("NO_COLOR")
    header, *body = laid.lines
    out = [f"\x1b[1m{header}\x1b[0m" if bold and header else header]
    for i, line in enumerate(body):
        out += [_fitted(text, width) for text in (before or {}).get(i, ())]
        out.append(line)
        out += [_fitted(text, width) for text in (after or {}).get(i, ())]
    click.echo("\n".join(out))
    if laid.hidden:  # said on stderr: stdout stays the table
        note = f"({len(laid.hidden)} columns not shown, see --columns: {', '.join(laid.hidden)})"
        echo(_fitted(note, width), err=True)


def print_wrapped(text: str) -> None:
    """Lines of already-visible text; on a terminal, one longer than it is wide is broken at
    spaces onto indented lines (never cut: `show` says everything; not left to the terminal,
    which wraps mid-word and without indent)."""
    import textwrap

    width = terminal_width()
    if width is None:
        click.echo(text)
        return
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * min(len(line) - len(line.lstrip()) + 4, width // 2)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False)
    click.echo("\n".join(out))


def verify_line(ident: int, ok: bool, path: str, detail: str, width: int | None) -> str:
    """`  12  ok      exp1/e07.keras  hash matches`: on a terminal, the path is cut from the
    left and the detail from the right to keep the line within `width`."""
    from ..core.render import visible
    from ..core.table import cell_width, cut_left, cut_right

    path, detail = visible(path), visible(detail)
    head = f"{ident:>5}  {'ok' if ok else 'FAILED':<6}  "
    if width is None or cell_width(head + path + "  " + detail) <= width:
        return f"{head}{path}  {detail}".rstrip()
    room = max(20, width - len(head) - 2)
    shown_path = cut_left(path, max(16, room - min(cell_width(detail), room // 2)))
    rest = max(0, width - len(head) - cell_width(shown_path) - 2)
    return f"{head}{shown_path}  {cut_right(detail, rest)}".rstrip()


def _fitted(text: str, width: int | None) -> str:
    """A line beside a table: on a terminal cut (keeping its start) rather than wrapped."""
    from ..core.render import visible
    from ..core.table import cut_right

    shown = visible(text).rstrip()
    return cut_right(shown, width) if width else shown


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
