"""Text tables that fit a terminal: column widths, alignment, numbers with one precision per
column, and cutting a path from the left (`…/run/e07.keras`) rather than wrapping. Pure:
strings in, lines out; the caller says how wide the terminal is (None: a pipe, never cut)."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

ELLIPSIS = "…"
GAP = "  "
MAX_DECIMALS = 5  # beyond this a metric column switches to scientific notation
SIGNIFICANT = 4  # the fewest significant digits a metric cell shows


@dataclass(frozen=True)
class Column:
    """`align`: "left" or "right" (numbers). `cut`: how a too-wide table shortens this column
    on a terminal: "left" keeps the end (a path's file name), "right" keeps the start (a
    reason), None never. `keep`: shown even when every cell is empty."""

    header: str
    align: str = "left"
    cut: str | None = None
    keep: bool = False
    min_width: int = 12
    # `shrink_first`: cut before the other cut columns (a listing's path, a log's reason).
    # `drop_last`: left out only once every other column that may go is gone, and once the cut
    # columns are down to HARD_FLOOR (a listing's metrics: what it is asked for).
    shrink_first: bool = False
    drop_last: bool = False


HARD_FLOOR = 16  # the narrowest a cut column gets before a drop_last column is left out


@dataclass(frozen=True)
class Laid:
    lines: list[str]
    hidden: list[str]  # headers of columns left out because the terminal is too narrow


def cell_width(text: str) -> int:
    """Terminal columns of `text`: East Asian wide characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def cut_left(text: str, width: int) -> str:
    """`text` in at most `width` columns, keeping its end: `…/exp1/e07.keras` (`cut_right` of
    the reversed text, reversed back)."""
    if cell_width(text) <= width:
        return text
    return cut_right(text[::-1], width)[::-1]


def cut_right(text: str, width: int) -> str:
    """`text` in at most `width` columns, keeping its start: `hash differs: catal…`."""
    if cell_width(text) <= width:
        return text
    if text.isascii():
        return text[: width - 1] + ELLIPSIS if width > 1 else ELLIPSIS
    kept: list[str] = []
    used = 1
    for char in text:
        used += cell_width(char)
        if used > width:
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> Laid:
    """The table's lines (header first): columns empty in every row are dropped, numbers are
    right-aligned, no line ends in spaces. With a `width`, cut columns shrink (the
    `shrink_first` ones first; a path from the left) and, if that is not enough, columns are
    hidden (listed in `hidden`): the rightmost that may go first, `drop_last` ones only after
    every other and once cut columns are down to HARD_FLOOR."""
    shown = [
        i
        for i, column in enumerate(columns)
        if column.keep or not rows or any(row[i] for row in rows)
    ]
    widths = {
        i: max([cell_width(columns[i].header), *(cell_width(row[i]) for row in rows)])
        for i in shown
    }
    hidden: list[str] = []
    left_out: list[int] = []
    if width is not None:
        natural = dict(widths)
        hard = False
        while True:
            # From the natural widths each time: a column left out gives its room back.
            widths = {i: natural[i] for i in shown}
            _shrink(columns, shown, widths, width, hard=hard)
            if len(shown) <= 1 or _total(widths, shown) <= width:
                break
            optional = [i for i in shown if not columns[i].keep]
            early = [i for i in optional if not columns[i].drop_last]
            if not early and optional and not hard:
                hard = True  # cut columns down to HARD_FLOOR before a drop_last column goes
                continue
            dropped = (early or optional or shown)[-1]
            shown.remove(dropped)
            left_out.append(dropped)
        hidden = [columns[i].header for i in sorted(left_out)]  # in the table's order
    lines = [_line(columns, [c.header for c in columns], shown, widths)]
    lines += [_line(columns, row, shown, widths) for row in rows]
    return Laid(lines, hidden)


def _total(widths: dict[int, int], shown: list[int]) -> int:
    return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)


def _shrink(
    columns: Sequence[Column],
    shown: list[int],
    widths: dict[int, int],
    width: int,
    *,
    hard: bool = False,
) -> None:
    """Cut the cut columns (the `shrink_first` ones first, then left to right) down to their
    min_width (`hard`: down to HARD_FLOOR) until the table fits."""
    order = sorted(shown, key=lambda i: not columns[i].shrink_first)
    for i in order:
        excess = _total(widths, shown) - width
        if excess <= 0:
            return
        if columns[i].cut:
            least = min(columns[i].min_width, HARD_FLOOR) if hard else columns[i].min_width
            floor = max(least, cell_width(columns[i].header))
            widths[i] = max(min(floor, widths[i]), widths[i] - excess)  # never wider than it was


def _line(
    columns: Sequence[Column], cells: Sequence[str], shown: list[int], widths: dict[int, int]
) -> str:
    parts = []
    for i in shown:
        column, text, size = columns[i], cells[i], widths[i]
        if cell_width(text) > size:
            text = cut_left(text, size) if column.cut == "left" else cut_right(text, size)
        pad = " " * (size - cell_width(text))
        parts.append(pad + text if column.align == "right" else text + pad)
    return GAP.join(parts).rstrip()


# ---- numbers: one precision per column, so the decimal points line up ----


def column_decimals(values: Sequence[float | None]) -> int | None:
    """The decimals of a metric column: enough for SIGNIFICANT digits of its smallest non-zero
    value, and more (up to MAX_DECIMALS) until distinct values print distinctly. None: the
    values are too small for MAX_DECIMALS (the column is printed in scientific notation)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    nonzero = [abs(v) for v in finite if v != 0]
    if not nonzero:
        return 0 if all(float(v).is_integer() for v in finite) else 1
    smallest = min(nonzero)
    if smallest < 10**-MAX_DECIMALS:
        return None
    if all(float(v).is_integer() for v in finite):
        return 0
    decimals = min(MAX_DECIMALS, max(0, SIGNIFICANT - 1 - math.floor(math.log10(smallest))))
    distinct = set(finite)
    while decimals < MAX_DECIMALS and len({f"{v:.{decimals}f}" for v in distinct}) < len(distinct):
        decimals += 1
    return decimals


def number_cells(values: Sequence[float | None]) -> list[str]:
    """A metric column's cells: one precision for all (see column_decimals); `null` for a
    value that is not a finite number (as JSON says), "" for a row without the metric."""
    decimals = column_decimals(values)
    cells = []
    for v in values:
        if v is None:
            cells.append("")
        elif not math.isfinite(v):
            cells.append("null")
        elif decimals is None:
            cells.append(f"{v:.{SIGNIFICANT - 1}e}")
        else:
            cells.append(f"{v:.{decimals}f}")
    return cells
