"""A metric's curve as SVG geometry for the web view's run page, drawn server-side. Pure.

The same series `ckpt plot` draws (`core.history.series`): the line over every epoch with a
finite value, one marker per checkpoint at its epoch's value, shaped by its first mark. This
module only scales them into a box; the view writes the elements (every text escaped: the
template, and `web.curve_markers` for the markers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .history import Series

WIDTH, HEIGHT = 720, 260
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 16, 16, 36
TICKS = 5


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    mark: str  # core.history.MARKS: the marker's shape and colour
    epoch: int
    value: float
    id: int


@dataclass(frozen=True)
class Tick:
    at: float  # x for an epoch tick, y for a value tick
    label: str


@dataclass(frozen=True)
class Curve:
    metric: str
    mode: str
    width: int
    height: int
    line: str  # the SVG path's `d` ("" when no epoch has a value)
    markers: tuple[Marker, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    unplaced: tuple[int, ...]  # checkpoint ids without an epoch or value to place them at


def curve(s: Series, width: int = WIDTH, height: int = HEIGHT) -> Curve:
    epochs = [e for e, _v in s.line] + [e for _k, e, _v, _i in s.markers]
    values = [v for _e, v in s.line] + [v for _k, _e, v, _i in s.markers]
    if not epochs:
        return Curve(s.metric, s.mode, width, height, "", (), (), (), s.unplaced)
    e0, e1 = min(epochs), max(epochs)
    v0, v1 = min(values), max(values)
    if v0 == v1:  # a flat curve: a band around it, not a division by zero
        v0, v1 = v0 - 0.5, v1 + 0.5
    span_x, span_y = max(e1 - e0, 1), v1 - v0
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM

    def x_of(epoch: int) -> float:
        return round(PAD_LEFT + (epoch - e0) / span_x * plot_w, 1)

    def y_of(value: float) -> float:
        return round(PAD_TOP + (v1 - value) / span_y * plot_h, 1)

    line = " ".join(
        f"{'M' if i == 0 else 'L'}{x_of(e)},{y_of(v)}" for i, (e, v) in enumerate(s.line)
    )
    markers = tuple(Marker(x_of(e), y_of(v), mark, e, v, i) for mark, e, v, i in s.markers)
    return Curve(
        s.metric,
        s.mode,
        width,
        height,
        line,
        markers,
        tuple(Tick(x_of(e), str(e)) for e in _epoch_ticks(e0, e1)),
        tuple(
            Tick(y_of(v0 + span_y * k / (TICKS - 1)), f"{v0 + span_y * k / (TICKS - 1):.4g}")
            for k in range(TICKS)
        ),
        s.unplaced,
    )


def _epoch_ticks(first: int, last: int) -> Sequence[int]:
    """At most TICKS+1 whole epochs, evenly apart, the first and the last among them."""
    if last - first <= TICKS:
        return range(first, last + 1)
    step = max(1, round((last - first) / TICKS))
    found = list(range(first, last, step))
    if last - found[-1] < step / 2:
        found[-1] = last
    else:
        found.append(last)
    return found
