"""What the CLI prints: escaped text lines, JSON documents, tables and progress of long work.

Every byte the `ckpt` command writes goes through here. Tables are laid out by core.table (no
rich: a cell is never markup); rich is imported only for the progress bar on a terminal."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from ..core.units import counted

if TYPE_CHECKING:
    from ..core.progress import Progress
    from ..core.table import Column


def echo(line: str, *, err: bool = False) -> None:
    """One line of text for a person: names in it are shown, never obeyed (see text.visible)."""
    from ..core.text import visible

    click.echo(visible(line), err=err)


def emit_json(doc: Any) -> None:
    # Indented for a person at a terminal; compact (and C-encoded: fast) for a script.
    click.echo(json.dumps(doc, indent=2 if sys.stdout.isatty() else None))


def say_passed_over(details: dict[str, Any]) -> None:
    """Why the answer is not the first candidate (`passed_over`: cannot resume, non-finite
    weights): said once on stderr, the whole list is in --json."""
    passed = details.get("passed_over") or []
    if passed:
        first = passed[0]
        more = f" (and {len(passed) - 1} more)" if len(passed) > 1 else ""
        echo(f"ckpt: passed over {first['path']}{more}: {first['reason']}", err=True)


def emit_json_rows(rows: Iterable[dict[str, Any]]) -> None:
    """A JSON array, one compact row per line: fast (C encoder) and still greppable. Rows are
    written a batch at a time (100,000 rows: not 200,000 writes), each batch as it is ready."""
    out = sys.stdout
    encode = _row_encoder()
    out.write("[")
    before, batch = "\n", []
    collecting = gc.isenabled()
    gc.disable()  # rows hold no cycles: the collections 100,000 of them trigger are a fifth
    try:
        for row in rows:
            batch.append(encode(row))
            if len(batch) == JSON_ROWS_PER_WRITE:
                out.write(before + ",\n".join(batch))
                before, batch = ",\n", []
    finally:
        if collecting:
            gc.enable()
    if batch:
        out.write(before + ",\n".join(batch))
    out.write("\n]\n")


JSON_ROWS_PER_WRITE = 1000


def _row_encoder() -> Callable[[Any], str]:
    """`json.dumps` with its defaults, its C encoder made once rather than once per row (a
    tenth of `list --json`); the same text (tests/e2e/test_cli_contract.py reads it)."""
    from json import encoder

    make_encoder = getattr(encoder, "c_make_encoder", None)  # not in typeshed's stubs
    if make_encoder is None:  # an interpreter without the C accelerator
        return json.dumps
    make = make_encoder(
        None, encoder.JSONEncoder().default, encoder.encode_basestring_ascii, None, ": ", ", ",
        False, False, True,
    )  # fmt: skip
    return lambda row: "".join(make(row, 0))


FLUSH_SECONDS = 0.1  # how long a finished item's line may wait to be printed on a terminal


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
    from ..core.table import layout
    from ..core.text import visible

    width = terminal_width()
    laid = layout(columns, [[visible(cell) for cell in row] for row in rows], width)
    bold = width is not None and not os.environ.get("NO_COLOR")
    header, *body = laid.lines
    out = [f"\x1b[1m{header}\x1b[0m" if bold and header else header]
    for i, line in enumerate(body):
        out += [fitted(text, width) for text in (before or {}).get(i, ())]
        out.append(line)
        out += [fitted(text, width) for text in (after or {}).get(i, ())]
    click.echo("\n".join(out))
    if laid.hidden:  # said on stderr: stdout stays the table
        hidden = counted(len(laid.hidden), "column")
        note = f"({hidden} not shown, see --columns: {', '.join(laid.hidden)})"
        echo(fitted(note, width), err=True)


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
    return path_line(f"{ident:>5}  {'ok' if ok else 'FAILED':<6}  ", path, detail, width)


def path_line(head: str, path: str, detail: str, width: int | None) -> str:
    """`HEAD PATH  DETAIL` within `width` on a terminal: the path keeps at least half the room
    (cut from the left: its file name stays), the detail the rest (cut from the right); into
    a pipe, whole."""
    from ..core.table import cell_width, cut_left, cut_right
    from ..core.text import visible

    path, detail = visible(path), visible(detail)
    if width is None or cell_width(head + path + "  " + detail) <= width:
        return f"{head}{path}  {detail}".rstrip()
    room = max(20, width - len(head) - 2)
    shown_path = cut_left(path, max(16, room - min(cell_width(detail), room // 2)))
    rest = max(0, width - len(head) - cell_width(shown_path) - 2)
    return f"{head}{shown_path}  {cut_right(detail, rest)}".rstrip()


def fitted(text: str, width: int | None) -> str:
    """A line beside a table: on a terminal cut (keeping its start) rather than wrapped."""
    from ..core.table import cut_right
    from ..core.text import visible

    shown = visible(text).rstrip()
    return cut_right(shown, width) if width else shown


class LiveWork:
    """Long work as it goes: a line per finished item (`line`), streamed to stdout whatever
    it is, and on a terminal a bar under the lines (`update`): items done of all, bytes,
    time left, the item at work. Made by `live_work`."""

    def __init__(self, verb: str, bar: Any, roots: Iterable[str] = (), by_bytes: bool = True):
        self.verb, self._bar, self.by_bytes = verb, bar, by_bytes
        # Longest first: a root inside another root names its own paths.
        self.roots = sorted(roots, key=len, reverse=True)
        # Until the first report (the use case's imports and catalog reads come first).
        self._task = bar.add_task("starting", total=None, item="") if bar is not None else None
        # On a terminal, lines wait here up to FLUSH_SECONDS and go out together: each print
        # under a live bar redraws it (a verify of 1000 small files took twice as long,
        # line by line). Meanwhile they are drawn in the bar's own region (see live_work),
        # so each is seen at once.
        self.pending: list[str] = []
        self._flushed = 0.0

    def relative(self, path: str) -> str:
        """`path` relative to its root (text.relative_path), as every line shows it."""
        from ..core.text import relative_path

        return relative_path(path, self.roots)

    def line(self, text: str) -> None:
        """One finished item's line; its names are shown, never obeyed (text.visible)."""
        from ..core.text import visible

        if self._bar is None:
            click.echo(visible(text))  # click flushes: each line reaches a pipe at once
        else:
            self.pending.append(visible(text))
            self.flush(due_only=True)

    def flush(self, *, due_only: bool = False) -> None:
        """The waiting lines printed above the bar, as written: no markup, no wrapping, no
        highlighting (`due_only`: only if the last flush is FLUSH_SECONDS old)."""
        import time

        now = time.monotonic()
        if not self.pending or (due_only and now - self._flushed < FLUSH_SECONDS):
            return
        text = "\n".join(self.pending)
        self.pending.clear()  # first: the bar's region stops drawing them as they are printed
        self._flushed = now
        self._bar.console.out(text, highlight=False)

    def update(self, p: Progress) -> None:
        """A use case's report (the callback it is given); nothing to do without a bar."""
        if self._bar is None:
            return
        self.flush(due_only=True)
        from ..core.table import cut_left
        from ..core.text import visible
        from ..core.units import format_size

        # Time left from bytes where the work is reading them (hashing, copying), else from
        # items (a Keras load takes seconds whatever the size).
        counted = f"{p.done} of {p.total}" if p.total is not None else str(p.done)
        text = f"{counted} {self.verb}"
        if p.total_bytes:
            text += f", {format_size(p.bytes)} of {format_size(p.total_bytes)}"
        by_bytes = self.by_bytes and bool(p.total_bytes)
        item = "" if p.finished else cut_left(visible(self.relative(p.item)), 40)
        self._bar.update(
            self._task,
            description=text,
            total=p.total_bytes if by_bytes else p.total,
            completed=p.bytes if by_bytes else p.done,
            item=item,
        )


@contextmanager
def live_work(
    verb: str, *, as_json: bool = False, roots: Iterable[str] = (), by_bytes: bool = True
) -> Iterator[LiveWork]:
    """A `LiveWork` whose bar is drawn only when stdout is a terminal and the output is not
    JSON: a pipe or a file gets the lines alone, --json one document at the end. The bar is
    on stdout, where the lines are (rich keeps it below them), and leaves no trace. Paths are
    shown relative to the first of `roots` they are in; `by_bytes`: time left from bytes."""
    if as_json or not sys.stdout.isatty():
        yield LiveWork(verb, None, roots, by_bytes)
        return
    from rich.console import Console, Group
    from rich.progress import (
        BarColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar
    from rich.text import Text

    waiting: list[str] = []  # the LiveWork's pending lines

    class LinesAndBar(Bar):
        def get_renderable(self) -> Any:  # called by the bar's refresh thread too
            shown = list(waiting)
            if not shown:
                return super().get_renderable()
            lines = Text("\n".join(shown), no_wrap=True, overflow="crop")
            return Group(lines, super().get_renderable())

    bar = LinesAndBar(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=24),
        TimeElapsedColumn(),  # the one sign of life while a single big file is worked on
        TimeRemainingColumn(),
        TextColumn("{task.fields[item]}", markup=False),
        console=Console(file=sys.stdout, markup=False, emoji=False, highlight=False),
        transient=True,
    )
    with bar:
        work = LiveWork(verb, bar, roots, by_bytes)
        work.pending = waiting
        try:
            yield work
        finally:
            work.flush()
