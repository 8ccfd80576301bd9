"""The pure pieces of terminal output: float32-free numbers, one precision per metric column,
column widths, cutting, dropped empty columns, paths relative to their root."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.cli.checkpoints import DEFAULT_LIST_COLUMNS
from ckpt_daemon.cli.tables import grouped_by_root, list_table, metric_order
from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.core.model import Checkpoint, CheckpointStatus
from ckpt_daemon.core.show_text import show_text
from ckpt_daemon.core.table import (
    ELLIPSIS,
    Column,
    cell_width,
    column_decimals,
    cut_left,
    cut_right,
    layout,
    number_cells,
)
from ckpt_daemon.core.text import config_text, packed, relative_path
from ckpt_daemon.core.units import short_time, shortest_float


def float32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


# ---- shortest_float ----


def test_float32_noise_is_gone() -> None:
    assert shortest_float(0.0010000000474974513) == "0.001"
    assert shortest_float(float32(0.9)) == "0.9"
    assert shortest_float(float32(1e-7)) == "1e-07"
    assert shortest_float(0.001953125) == "0.001953125"  # 2**-9: exact, every digit needed


def test_a_genuine_float64_keeps_its_repr() -> None:
    assert shortest_float(0.1) == "0.1"
    assert shortest_float(0.1 + 0.2) == repr(0.1 + 0.2)
    assert shortest_float(1e300) == "1e+300"  # beyond float32: not rounded through it


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_the_shortest_text_reads_back_as_the_same_float32(x: float) -> None:
    text = shortest_float(x)
    assert float32(float(text)) == x
    assert len(text) <= len(repr(x))


def test_short_time_drops_milliseconds() -> None:
    assert short_time("2026-12-01T08:19:19.250Z") == "2026-12-01T08:19:19Z"
    assert short_time("2026-12-01T08:19:19Z") == "2026-12-01T08:19:19Z"
    assert short_time(None) == "-"


# ---- metric columns: one precision per column ----


def test_four_significant_digits_of_the_smallest_value() -> None:
    assert number_cells([1.0919, 1.0673, 1.6827]) == ["1.092", "1.067", "1.683"]
    assert number_cells([0.5208, 0.3125]) == ["0.5208", "0.3125"]
    assert number_cells([12.5, 0.25]) == ["12.5000", "0.2500"]  # same decimals: aligned


def test_more_decimals_until_distinct_values_differ_but_at_most_five() -> None:
    assert column_decimals([0.10001, 0.10002]) == 5
    assert column_decimals([0.100001, 0.100002]) == 5  # capped
    assert column_decimals([0.25, 0.25]) == 4


def test_tiny_values_switch_the_column_to_scientific() -> None:
    assert number_cells([1e-7, 2e-3]) == ["1.000e-07", "2.000e-03"]


def test_integers_stay_integers_and_missing_or_non_finite_cells() -> None:
    assert number_cells([3.0, 12.0]) == ["3", "12"]
    assert number_cells([1.5, None, float("nan"), float("inf")]) == ["1.500", "", "null", "null"]


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=30))
def test_a_column_has_one_decimal_position(values: list[float]) -> None:
    cells = [c for c in number_cells(values) if c]
    decimals = {len(c.partition("e")[0].partition(".")[2]) for c in cells}
    assert len(decimals) == 1, cells
    if "e" not in cells[0]:  # fixed-point: each cell is its value rounded to those decimals
        error = 0.5 * 10 ** -decimals.pop() + 1e-9
        assert all(abs(float(c) - v) <= error for c, v in zip(cells, values, strict=True))


# ---- layout ----

COLUMNS = [
    Column("ID", align="right", keep=True),
    Column("PATH", cut="left", keep=True, min_width=16),
    Column("EPOCH", align="right"),
    Column("STEP", align="right"),
    Column("loss", align="right"),
]
ROWS = [
    ["1", "exp1/checkpoints/model-01-0.5000.keras", "1", "", "0.5000"],
    ["22", "exp1/checkpoints/model-02-0.2500.keras", "2", "", "0.2500"],
]


def test_empty_columns_are_dropped_numbers_right_aligned_no_trailing_space() -> None:
    lines = layout(COLUMNS, ROWS, None).lines
    assert lines[0].split() == ["ID", "PATH", "EPOCH", "loss"]  # STEP: empty in every row
    assert lines[1].startswith(" 1  exp1/")
    assert all(line == line.rstrip() for line in lines)
    assert len({len(line) for line in lines}) == 1  # the last column is right-aligned
    assert [line.rindex(".") for line in lines[1:]] == [lines[1].rindex(".")] * 2


def test_a_pipe_never_cuts_and_a_terminal_cuts_the_path_from_the_left() -> None:
    assert ELLIPSIS not in "".join(layout(COLUMNS, ROWS, None).lines)
    laid = layout(COLUMNS, ROWS, 40)
    assert all(cell_width(line) <= 40 for line in laid.lines), laid.lines
    assert laid.hidden == []
    assert f"{ELLIPSIS}" in laid.lines[1] and laid.lines[1].split()[1].endswith("0.5000.keras")


def test_metrics_go_last_and_a_dropped_column_gives_its_room_back() -> None:
    """Issue 21 item 8: the path is cut first, the other columns go next (rightmost first),
    the metric columns last; a column left out gives its width back to the path."""
    columns = [
        Column("ID", align="right", keep=True),
        Column("PATH", cut="left", keep=True, min_width=24, shrink_first=True),
        Column("EPOCH", align="right"),
        Column("SIZE", align="right"),
        Column("loss", align="right", drop_last=True),
        Column("val_loss", align="right", drop_last=True),
    ]
    rows = [
        [
            "1",
            "exp1/a/long/run/folder/checkpoints/model-01-0.5000.keras",
            "1",
            "1 kB",
            "0.5",
            "0.6",
        ],
    ]
    laid = layout(columns, rows, 60)  # the path cut, nothing left out
    assert laid.hidden == [] and laid.lines[1].split()[1].endswith("/model-01-0.5000.keras")
    laid = layout(columns, rows, 52)
    assert laid.hidden == ["SIZE"], laid.lines  # not a metric
    assert laid.lines[0].split() == ["ID", "PATH", "EPOCH", "loss", "val_loss"]
    assert all(cell_width(line) <= 52 for line in laid.lines), laid.lines
    laid = layout(columns, rows, 40)  # the path down to 16 before a metric goes
    assert laid.hidden == ["EPOCH", "SIZE"], laid.lines
    assert all(cell_width(line) <= 40 for line in laid.lines), laid.lines
    laid = layout(columns, rows, 30)
    assert laid.hidden == ["EPOCH", "SIZE", "val_loss"], laid.lines
    assert all(cell_width(line) <= 30 for line in laid.lines), laid.lines


def test_a_reason_is_cut_before_the_path() -> None:
    columns = [
        Column("AT", keep=True),
        Column("PATH", cut="left", keep=True, min_width=16),
        Column("REASON", cut="right", min_width=8, shrink_first=True),
    ]
    rows = [["12:00", "exp1/checkpoints/model.12-0.8225.keras", "x" * 40]]
    laid = layout(columns, rows, 60)
    assert laid.lines[1].split()[1] == "exp1/checkpoints/model.12-0.8225.keras", laid.lines
    assert all(cell_width(line) <= 60 for line in laid.lines)


def test_too_narrow_hides_the_rightmost_columns_and_says_which() -> None:
    laid = layout(COLUMNS, ROWS, 24)
    assert all(cell_width(line) <= 24 for line in laid.lines), laid.lines
    assert laid.hidden == ["EPOCH", "loss"]


def test_cutting_counts_wide_characters() -> None:
    assert cell_width("実験") == 4
    assert cut_left("runs/実験/a.keras", 11) == f"{ELLIPSIS}験/a.keras"
    assert cut_left("runs/実験/a.keras", 10) == f"{ELLIPSIS}/a.keras"  # no half a character
    assert cell_width(cut_left("実験実験実験", 5)) <= 5
    assert cut_right("hash differs: catalog x", 10) == f"hash diff{ELLIPSIS}"


@given(st.text(), st.integers(min_value=1, max_value=40))
def test_a_cut_text_fits(text: str, width: int) -> None:
    assert cell_width(cut_left(text, width)) <= max(width, 1)
    assert cell_width(cut_right(text, width)) <= max(width, 1)


# ---- paths and show ----


def test_paths_relative_to_the_root_they_are_in() -> None:
    roots = ["/data/runs", "/scratch/"]
    assert relative_path("/data/runs/exp1/e01.keras", roots) == "exp1/e01.keras"
    assert relative_path("/scratch/x.h5", roots) == "x.h5"
    assert relative_path("/data/runs", roots) == "."
    assert relative_path("/data/runs2/x.h5", roots) == "/data/runs2/x.h5"  # not a prefix match


def test_config_text_and_packing() -> None:
    loss = {"class_name": "SparseCategoricalCrossentropy", "config": {"name": "scce"}}
    assert config_text(loss) == "scce (SparseCategoricalCrossentropy)"
    assert config_text([0.0010000000474974513, None, True]) == "[0.001, null, true]"
    lines = packed("  optimizer", [f"k{i}=value" for i in range(30)], width=40)
    assert all(len(line) <= 40 for line in lines) and len(lines) > 3


def test_show_prints_the_training_config_without_float32_noise() -> None:
    doc = {
        **{k: None for k in ("format", "kind", "keras_version", "backend", "model_class")},
        **{k: None for k in ("model_name", "size_bytes", "weights_bytes", "optimizer_bytes")},
        **{k: None for k in ("n_params", "n_trainable_params", "epoch", "step", "iterations")},
        "path": "/r/exp1/e.keras",
        "root": "/r",
        "id": 1,
        "run": ".",
        "status": "ok",
        "reason": None,
        "optimizer": "Adam",
        "learning_rate": 0.0010000000474974513,
        "mtime": "2026-12-01T00:00:00.000Z",
        "indexed_at": None,
        "hash": None,
        "metrics": {"val_loss": 0.23000000417232513},
        "metric_sources": {"val_loss": "filename"},
        "training_config": {"loss": "mse", "metrics": ["mae"], "jit_compile": False},
        "optimizer_config": {"learning_rate": 0.0010000000474974513, "clipnorm": None},
    }
    text = show_text(doc)
    assert "0.0010000000474974513" not in text and "0.23000000417232513" not in text
    assert "learning rate 0.001" in text and "metric val_loss = 0.23 (filename)" in text
    assert "training config loss=mse metrics=[mae] jit_compile=false" in text
    # The config's learning_rate is the `optimizer` line's: said once; None values not at all.
    assert "learning_rate" not in text and "clipnorm" not in text
    assert all(line == line.rstrip() for line in text.splitlines())
    assert text.splitlines()[:2] == ["exp1/e.keras", "  root /r"]


# ---- ckpt list's columns (cli/tables: model values in, cells out) ----


def checkpoint(ident: int, root: str, rel: str, **fields: Any) -> Checkpoint:
    values: dict[str, Any] = {
        "id": ident,
        "path": f"{root}/{rel}",
        "run": rel.rsplit("/", 1)[0],
        "root": root,
        "format": None,
        "kind": None,
        "status": CheckpointStatus.OK,
        "reason": None,
        "size_bytes": 1000,
        "mtime": 0.0,
        "inode": None,
        "hash": None,
        "indexed_at": None,
    }
    return Checkpoint(**{**values, **fields})


ROWS_OF_TWO_ROOTS = [
    checkpoint(1, "/a", "exp1/e01.keras", epoch=1, metrics={"loss": 0.5, "val_loss": None}),
    checkpoint(2, "/b", "tf/ckpt-32", step=32),
    checkpoint(3, "/a", "exp1/bad.keras", status=CheckpointStatus.CORRUPT, reason="truncated zip"),
]


def test_list_columns_by_default() -> None:
    rows = grouped_by_root(ROWS_OF_TWO_ROOTS)
    assert [c.id for c in rows] == [1, 3, 2]  # grouped by root, query order inside
    header, cells, headings = list_table(rows, None, None, default=DEFAULT_LIST_COLUMNS)
    assert [c.header for c in header] == [
        "ID", "PATH", "EPOCH", "STEP", "SIZE", "STATUS", "LOCATION", "VERSIONS", "loss",
        "val_loss",
    ]  # fmt: skip
    # LOCATION is empty for bytes at their path (an empty column is left out when laid out).
    assert cells[0] == ["1", "exp1/e01.keras", "1", "", "1.0 kB", "ok", "", "", "0.5000", "null"]
    assert cells[1][5] == "corrupt*" and "truncated" not in " ".join(cells[1])
    assert cells[2][:4] == ["2", "tf/ckpt-32", "", "32"]  # a step in STEP, never `s32`
    assert headings == {0: ["root /a"], 2: ["root /b"]}
    assert list_table(rows[:2], None, None, default=DEFAULT_LIST_COLUMNS)[2] == {}  # one root
    places = {1: ("remote", "s3://b/k"), 3: ("both", "s3://b/j")}  # tiered; fetched back
    _h, cells, _ = list_table(rows, None, None, default=DEFAULT_LIST_COLUMNS, places=places)
    assert [row[6] for row in cells] == ["remote", "both", ""]


def test_list_columns_chosen_and_unknown_ones_refused() -> None:
    header, cells, _ = list_table(
        ROWS_OF_TWO_ROOTS, "val_loss,path,format", None, default=DEFAULT_LIST_COLUMNS
    )
    assert [c.header for c in header] == ["val_loss", "PATH", "FORMAT"]
    assert all(c.keep for c in header)  # asked for: shown even when empty
    assert cells[0] == ["null", "exp1/e01.keras", ""]
    header, _, _ = list_table(ROWS_OF_TWO_ROOTS, "id,metrics", "val_loss", default="")
    assert [c.header for c in header] == ["ID", "val_loss"]
    with pytest.raises(UsageError, match=r"unknown column 'epcoh'.*metrics in this listing"):
        list_table(ROWS_OF_TWO_ROOTS, "id,epcoh", None, default=DEFAULT_LIST_COLUMNS)


def test_metrics_sort_with_val_after_train() -> None:
    assert metric_order(["val_loss", "loss", "val_acc", "acc", "lr"]) == [
        "acc", "val_acc", "loss", "val_loss", "lr",
    ]  # fmt: skip


def test_counts_agree_with_their_nouns() -> None:
    from ckpt_daemon.core.name_parts import _precision
    from ckpt_daemon.core.units import counted

    assert [counted(n, "column") for n in (0, 1, 2)] == ["0 columns", "1 column", "2 columns"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries")[2:] == (
        "entries"
    )
    assert _precision("0.5") == "rounded to 1 place" and _precision("0.25") == "rounded to 2 places"
    assert _precision("1.5e-03") == "rounded to 1 decimal in scientific notation"
