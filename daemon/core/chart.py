"""A metric's curve as lines of unicode text that fit a terminal: `ckpt history`'s chart. Pure.

Each epoch is a column (several epochs share one when the run has more epochs than the terminal
has columns: the most telling glyph wins), each value a row of `height`; a checkpoint is drawn
as its glyph (`core.history.GLYPHS`), a logged epoch without one as a bullet, and the columns
between two epochs as dots, so the curve reads as a line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .history import GLYPHS, MARKS, NO_CHECKPOINT, History, glyph

HEIGHT = 8
MIN_PLOT_WIDTH = 12
BETWEEN = "·"
# Which glyph wins a shared cell: a checkpoint's (most telling first), then a bare epoch.
_RANK = {GLYPHS[mark]: i for i, mark in enumerate(MARKS)} | {NO_CHECKPOINT: len(MARKS)}
LEGEND = {
    **{GLYPHS[mark]: mark for mark in MARKS},
    NO_CHECKPOINT: "no checkpoint",
}


@dataclass(frozen=True)
class Point:
    epoch: int
    value: float
    glyph: str


def points(history: History, metric: str) -> list[Point]:
    """The epochs with a finite value of `metric`, each with its most telling glyph."""
    out = []
    for row in history.rows:
        value = row.values.get(metric)
        if row.epoch is None or value is None or not math.isfinite(value):
            continue
        glyphs = [glyph(m, metric) for m in row.checkpoints] or [NO_CHECKPOINT]
        out.append(Point(row.epoch, value, min(glyphs, key=_RANK.__getitem__)))
    return out


def chart(title: str, found: Sequence[Point], width: int, height: int = HEIGHT) -> list[str]:
    """`title`, then `height` rows of the plot with the value axis on the left, the epoch axis
    and its labels below; every line at most `width` columns. [] when there is nothing to
    draw or no room for it."""
    if not found or height < 2:
        return []
    lo, hi = min(p.value for p in found), max(p.value for p in found)
    labels = [_number(hi), _number((lo + hi) / 2), _number(lo)]
    pad = max(len(text) for text in labels)
    plot = width - pad - 2
    if plot < MIN_PLOT_WIDTH:
        return []
    first, last = found[0].epoch, found[-1].epoch
    grid = [[" "] * plot for _ in range(height)]

    def x_of(epoch: int) -> int:
        return 0 if last == first else round((epoch - first) * (plot - 1) / (last - first))

    def y_of(value: float) -> int:
        return (height - 1) // 2 if hi == lo else round((hi - value) / (hi - lo) * (height - 1))

    cells = [(x_of(p.epoch), y_of(p.value), p.glyph) for p in found]
    for (x1, y1, _), (x2, y2, _) in itertools.pairwise(cells):
        for x in range(x1 + 1, x2):
            grid[round(y1 + (y2 - y1) * (x - x1) / (x2 - x1))][x] = BETWEEN
    drawn: dict[int, tuple[int, str]] = {}  # column -> (row, glyph) of the winner
    for x, y, mark in cells:
        if x not in drawn or _RANK[mark] <= _RANK[drawn[x][1]]:
            if x in drawn:
                grid[drawn[x][0]][x] = " "
            drawn[x] = (y, mark)
    for x, (y, mark) in drawn.items():
        grid[y][x] = mark
    rows = {0: labels[0], (height - 1) // 2: labels[1], height - 1: labels[2]}
    lines = [title[:width]]
    for y, cells_of_row in enumerate(grid):
        axis = "┤" if y in rows else "│"
        lines.append(f"{rows.get(y, ''):>{pad}} {axis}{''.join(cells_of_row)}".rstrip())
    lines.append(f"{'':>{pad}} └{'─' * plot}")
    lines.append(" " * (pad + 2) + _epoch_labels([p.epoch for p in found], x_of, plot))
    return [line.rstrip() for line in lines]


def _epoch_labels(epochs: Sequence[int], x_of: Callable[[int], int], plot: int) -> str:
    """Epoch numbers under their columns, left to right, never overlapping; the last one
    always (right-aligned at the end when it would not fit under its column)."""
    line = [" "] * plot
    free = 0
    last_text = str(epochs[-1])
    room_end = plot - len(last_text)
    for epoch in epochs[:-1]:
        text, x = str(epoch), x_of(epoch)
        if x >= free and x + len(text) < room_end - 1:
            line[x : x + len(text)] = text
            free = x + len(text) + 2
    start = min(max(x_of(epochs[-1]), free), room_end)
    if start >= free or len(epochs) == 1:
        line[start : start + len(last_text)] = last_text
    return "".join(line).rstrip()


def _number(value: float) -> str:
    return f"{value:.4g}"


def legend(charts: Sequence[Sequence[str]], width: int) -> list[str]:
    """The glyphs the charts use, with what each means: lines of at most `width` columns,
    broken between entries (never inside one, unless one alone is wider)."""
    used = {char for lines in charts for line in lines[1:] for char in line}
    parts = [f"{g} {meaning}" for g, meaning in LEGEND.items() if g in used]
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += "   " + part
        else:
            lines.append(part[:width])
    return lines
