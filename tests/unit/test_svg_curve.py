"""The run page's curve: the `ckpt plot` series scaled into the SVG box."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.history import Series
from ckpt_daemon.core.svg_curve import (
    HEIGHT,
    PAD_BOTTOM,
    PAD_LEFT,
    PAD_RIGHT,
    PAD_TOP,
    WIDTH,
    curve,
)


def series(line: list[tuple[int, float]], marks: list[tuple[str, int, float, int]]) -> Series:
    return Series("exp", "val_loss", "min", tuple(line), tuple(marks), ())


def test_the_lowest_loss_is_drawn_lowest_and_the_first_epoch_leftmost() -> None:
    drawn = curve(
        series(
            [(1, 1.0), (2, 0.5), (3, 0.7)],
            [("trashed", 1, 1.0, 10), ("best", 2, 0.5, 11), ("kept", 3, 0.7, 12)],
        )
    )
    by_id = {m.id: m for m in drawn.markers}
    assert by_id[11].y == HEIGHT - PAD_BOTTOM and by_id[10].y == PAD_TOP
    assert by_id[10].x == PAD_LEFT and by_id[12].x == WIDTH - PAD_RIGHT
    assert drawn.line.startswith("M") and drawn.line.count("L") == 2
    assert [t.label for t in drawn.x_ticks] == ["1", "2", "3"]


def test_nothing_to_draw_draws_nothing() -> None:
    drawn = curve(series([], []))
    assert drawn.line == "" and drawn.markers == ()


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.floats(-1e6, 1e6, allow_nan=False)),
        min_size=1,
        max_size=50,
    )
)
def test_every_point_is_inside_the_box(points: list[tuple[int, float]]) -> None:
    points = sorted(dict(points).items())
    drawn = curve(series(points, [("kept", e, v, i) for i, (e, v) in enumerate(points)]))
    for m in drawn.markers:
        assert PAD_LEFT <= m.x <= WIDTH - PAD_RIGHT
        assert PAD_TOP - 0.1 <= m.y <= HEIGHT - PAD_BOTTOM + 0.1
        assert math.isfinite(m.x) and math.isfinite(m.y)
    assert len(drawn.x_ticks) <= 7
