"""The only matplotlib import: `ckpt plot`'s PNG, drawn from core.history's series.

matplotlib is an optional extra (`pip install 'ckpt-daemon[plot]'`): loaded only by this
command, with the Agg backend (no display), to bytes (the file is written by the caller)."""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import UsageError
from ..core.history import MARKS, Series
from ..core.text import visible

# Marker per mark: shape, size, fill: "filled" in the run's colour with a black edge, "hollow"
# (the edge in the run's colour), "line" (a marker of strokes only: `x`).
STYLE = {
    "best": ("*", 240, "filled"),
    "pinned": ("^", 90, "filled"),
    "trashed": ("X", 80, "filled"),
    "missing": ("x", 70, "line"),
    "version": ("D", 60, "hollow"),
    "kept": ("o", 50, "filled"),
}
MISSING_HINT = "ckpt plot needs matplotlib: pip install 'ckpt-daemon[plot]'"


def require() -> Any:
    """matplotlib's pyplot (Agg), or UsageError (exit 2) with one line saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError(MISSING_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class Rendered:
    png: bytes
    # Where each checkpoint's marker is, in pixels of the PNG (x from the left, y from the top).
    at: dict[int, tuple[float, float]]


def render(drawn: Sequence[Series], metric: str, *, marks: Collection[str] = MARKS) -> Rendered:
    """A PNG of every run's line with its checkpoints as markers, a legend of runs and marks.
    `marks`: which marks are drawn (a test draws them one at a time, and none, to compare)."""
    plt = require()
    # A name is data: `$x$` in a run or metric name is not mathtext (a bad one would raise).
    with plt.rc_context({"text.parse_math": False, "text.usetex": False}):
        return _drawn(plt, drawn, visible(metric), marks)


def _drawn(plt: Any, drawn: Sequence[Series], metric: str, marks: Collection[str]) -> Rendered:
    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    try:
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        used: set[str] = set()
        for i, s in enumerate(drawn):
            colour = colours[i % len(colours)]
            if s.line:
                xs, ys = zip(*s.line, strict=True)
                ax.plot(xs, ys, color=colour, linewidth=1.5, label=f"{visible(s.run)} ({s.mode})")
            for mark in (m for m in MARKS if m in marks):
                at = [(e, v) for k, e, v, _ in s.markers if k == mark]
                if not at:
                    continue
                used.add(mark)
                xs, ys = zip(*at, strict=True)
                ax.scatter(xs, ys, zorder=3, **_marker(mark, colour))
        for mark in (m for m in MARKS if m in used):  # one legend entry per mark, in grey
            ax.scatter([], [], label=mark, **_marker(mark, "grey"))
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} per epoch")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        fig.canvas.draw()  # the layout is final: data coordinates map to the saved pixels
        height = fig.bbox.height
        places: dict[int, tuple[float, float]] = {}
        for one in drawn:
            for mark, epoch, value, ident in one.markers:
                if mark not in marks:
                    continue
                x, y = ax.transData.transform((epoch, value))
                places[ident] = (float(x), float(height - y))
        out = io.BytesIO()
        fig.savefig(out, format="png")
        return Rendered(out.getvalue(), places)
    finally:
        plt.close(fig)


def _marker(mark: str, colour: str) -> dict[str, Any]:
    shape, size, fill = STYLE[mark]
    if fill == "line":
        return {"marker": shape, "s": size, "color": colour, "linewidths": 2}
    if fill == "hollow":
        return {
            "marker": shape,
            "s": size,
            "facecolors": "none",
            "edgecolors": colour,
            "linewidths": 1.5,
        }
    return {"marker": shape, "s": size, "color": colour, "edgecolors": "black", "linewidths": 0.8}
