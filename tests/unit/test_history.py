"""`ckpt history`, `plot` and `du` decisions (core.history, core.chart, core.usage): which epochs
are shown, the marks of each checkpoint, the best per metric, chart cells that fit any width,
the plot's series covering every checkpoint, and disk usage by kind. Pure: tables and
properties, no files."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.chart import GLYPHS, NO_CHECKPOINT, chart, legend, points
from ckpt_daemon.core.history import (
    build,
    chosen_metrics,
    history_json,
    marks_of,
    members_of,
    series,
    table,
    versioned_run,
)
from ckpt_daemon.core.model import Checkpoint, CheckpointStatus
from ckpt_daemon.core.table import cell_width, layout
from ckpt_daemon.core.usage import ArtifactBytes, CheckpointBytes, summarize, usage_json
from ckpt_daemon.core.versions import is_version_path

ROOT = "/data/runs"
S = CheckpointStatus


def ckpt(
    id_: int,
    epoch: int | None,
    status: S = S.OK,
    *,
    path: str | None = None,
    pinned: bool = False,
    run: str = "exp1",
    **metrics: float | None,
) -> Checkpoint:
    return Checkpoint(
        id=id_,
        path=path or f"{ROOT}/{run}/e{epoch or 0:02d}-{id_}.keras",
        run=run,
        root=ROOT,
        format=None,
        kind="full",
        status=status,
        reason=None,
        size_bytes=100,
        mtime=1000.0 + id_,
        inode=id_,
        hash=None,
        indexed_at=None,
        epoch=epoch,
        pinned=pinned,
        metrics=dict(metrics),
    )


LOGGED = {
    e: {"loss": 2.0 - 0.1 * e, "val_loss": 2.5 - 0.1 * e, "val_acc": 0.1 * e} for e in range(1, 11)
}


def test_marks_say_what_became_of_each_checkpoint() -> None:
    assert marks_of(ckpt(1, 1), ()) == ("kept",)
    assert marks_of(ckpt(1, 1), ("val_loss",)) == ("best", "kept")
    assert marks_of(ckpt(1, 1, pinned=True), ()) == ("pinned", "kept")
    assert marks_of(ckpt(1, 1, S.TRASHED), ()) == ("trashed",)
    for gone in (S.MISSING, S.REMOVED, S.PURGED):
        assert marks_of(ckpt(1, 1, gone), ()) == ("missing",)
    for on_disk in (S.INCOMPLETE, S.CORRUPT, S.UNREADABLE):
        assert marks_of(ckpt(1, 1, on_disk), ()) == ("kept",)
    version = f"{ROOT}/exp1/.ckpt-versions/best.keras.g3"
    assert marks_of(ckpt(1, 1, path=version), ()) == ("version",)
    assert marks_of(ckpt(1, 1, S.TRASHED, path=version), ()) == ("trashed", "version")


def test_versions_are_a_path_component_and_belong_to_their_run() -> None:
    assert is_version_path(f"{ROOT}/exp1/.ckpt-versions/a.keras")
    assert is_version_path(".ckpt-versions/exp1/a.keras")
    assert not is_version_path(f"{ROOT}/exp1/my.ckpt-versions/a.keras")
    assert not is_version_path(f"{ROOT}/exp1/.ckpt-versions2/a.keras")
    assert versioned_run("exp1/.ckpt-versions") == "exp1"
    assert versioned_run(".ckpt-versions/exp1") == "exp1"
    assert versioned_run("exp1") == "exp1"
    rows = [
        ckpt(1, 1),
        ckpt(2, 1, run="exp1/.ckpt-versions", path=f"{ROOT}/exp1/.ckpt-versions/a.keras"),
        ckpt(3, 1, run="exp1/sub"),
        ckpt(4, 1, run="exp1/.ckpt-versions", path=f"{ROOT}/exp1/.ckpt-versions/ok.txt.keras"),
    ]
    assert [c.id for c in members_of("exp1", rows)] == [1, 2, 4]


def test_every_epoch_is_shown_with_or_without_a_checkpoint() -> None:
    rows = [
        ckpt(1, 2, val_loss=2.3),
        ckpt(2, 5, S.TRASHED),
        ckpt(3, 12, val_loss=1.0),
        ckpt(4, None),
    ]
    h = build("exp1", ROOT, rows, LOGGED, ["val_loss"])
    assert [r.epoch for r in h.rows] == [*range(1, 11), 12, None]
    assert [c.checkpoint.id for c in h.rows[1].checkpoints] == [1]
    assert h.rows[0].checkpoints == ()
    # A logged value wins; an epoch the logs lack takes the checkpoint's own value.
    assert math.isclose(h.rows[1].values["val_loss"], 2.3)
    assert h.rows[-2].values == {"val_loss": 1.0}
    assert h.rows[-1].values == {}


def test_best_is_per_metric_with_its_mode_among_ok_checkpoints() -> None:
    rows = [
        ckpt(1, 1, val_loss=0.5, val_acc=0.9),
        ckpt(2, 2, val_loss=0.4, val_acc=0.8),
        ckpt(3, 3, S.TRASHED, val_loss=0.1, val_acc=0.99),  # gone: never the best
        ckpt(4, 4, val_loss=None, val_acc=None),  # logged as NaN
    ]
    h = build("exp1", ROOT, rows, {}, ["val_loss", "val_acc"])
    assert h.metrics == (("val_loss", "min"), ("val_acc", "max"))
    assert h.best == {"val_loss": 2, "val_acc": 1}
    by_id = {m.checkpoint.id: m for m in h.checkpoints}
    assert by_id[1].best_for == ("val_acc",) and by_id[2].best_for == ("val_loss",)
    assert by_id[3].marks == ("trashed",)
    doc = history_json(h)
    assert doc["best"] == {"val_loss": 2, "val_acc": 1}
    assert [e["values"] for e in doc["epochs"]][3] == {"val_loss": None, "val_acc": None}


def test_default_metrics_monitored_then_val_loss_and_loss() -> None:
    assert chosen_metrics([], LOGGED, []) == ["val_loss", "loss"]
    assert chosen_metrics([], LOGGED, [], ["val_acc"]) == ["val_acc", "val_loss", "loss"]
    assert chosen_metrics(["acc", "acc"], LOGGED, []) == ["acc"]
    assert chosen_metrics([], {}, [ckpt(1, 1, accuracy=0.5, auc=0.7)]) == ["accuracy"]
    assert chosen_metrics([], {}, [ckpt(1, 1)]) == []


def test_table_has_a_row_per_checkpoint_and_per_bare_epoch() -> None:
    rows = [ckpt(1, 2), ckpt(2, 2, S.MISSING), ckpt(3, 3, pinned=True)]
    h = build("exp1", ROOT, rows, {e: LOGGED[e] for e in (1, 2, 3)}, ["val_loss"])
    columns, cells = table(h)
    assert [c.header for c in columns] == ["EPOCH", "val_loss", "MARKS", "PATH"]
    assert [r[0] for r in cells] == ["1", "2", "", "3"]
    assert cells[0][2] == NO_CHECKPOINT and cells[2][1] == ""  # values on the epoch's first row
    assert cells[2][2] == "× missing" and cells[3][2] == "▲ pinned,kept"
    assert cells[1][3] == "exp1/e02-1.keras"  # relative to the root
    assert layout(columns, cells, 40).lines  # fits core.table


def long_run(n: int) -> list[Checkpoint]:
    return [
        ckpt(i, i, S.TRASHED if i % 3 else S.OK, val_loss=LOGGED[1 + i % 10]["val_loss"])
        for i in range(1, n + 1, 2)
    ]


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(min_value=1, max_value=240),
    epochs=st.integers(min_value=1, max_value=400),
    spread=st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_the_chart_fits_any_width(width: int, epochs: int, spread: float) -> None:
    logged = {e: {"val_loss": 1.0 + spread * ((e * 7919) % 13)} for e in range(1, epochs + 1)}
    h = build("exp1", ROOT, long_run(epochs), logged, ["val_loss"])
    lines = chart("val_loss", points(h, "val_loss"), width)
    assert all(cell_width(line) <= width for line in lines), lines
    if width >= 30:
        assert len(lines) == 1 + 8 + 2
        shown = legend([lines], width)
        assert shown and all(len(line) <= width for line in shown)
        assert " ".join(shown).count("no checkpoint") == (NO_CHECKPOINT in "".join(lines[1:]))


def test_every_checkpoint_has_its_glyph_when_there_is_room() -> None:
    rows = [
        ckpt(1, 1, val_loss=2.4),
        ckpt(2, 3, S.TRASHED),
        ckpt(3, 5, pinned=True),
        ckpt(4, 7, S.MISSING),
        ckpt(5, 8, path=f"{ROOT}/exp1/.ckpt-versions/e08.keras"),
    ]
    h = build("exp1", ROOT, rows, LOGGED, ["val_loss", "loss"])
    lines = chart("val_loss", points(h, "val_loss"), 100)
    body = "".join(lines[1:9])
    assert [body.count(GLYPHS[k]) for k in ("best", "trashed", "pinned", "missing", "version")] == [
        1,
        1,
        1,
        1,
        1,
    ]
    assert body.count(GLYPHS["kept"]) == 0  # the one kept ok checkpoint is the best
    assert body.count(NO_CHECKPOINT) == 10 - 5  # logged epochs without a checkpoint
    assert "1" in lines[-1].split() and "10" in lines[-1].split()  # epoch axis ends labelled
    # Only checkpoint 1 has a value (the catalog's): the best, at epoch 1's value, the top row.
    assert h.best["val_loss"] == 1 and lines[1].split("┤")[1].startswith(GLYPHS["best"])
    assert chart("val_loss", [], 100) == [] and chart("x", points(h, "val_loss"), 10) == []


def test_plot_series_places_every_checkpoint() -> None:
    rows = [*long_run(20), ckpt(99, None), ckpt(100, 40)]  # no epoch; an epoch with no value
    h = build("exp1", ROOT, rows, LOGGED, ["val_loss"])
    s = series(h, "val_loss")
    placed = {i for *_, i in s.markers}
    assert placed | set(s.unplaced) == {c.id for c in rows}
    assert set(s.unplaced) == {99, 100}
    assert [mark for mark, *_ in s.markers].count("best") == 1
    assert [e for e, _ in s.line] == sorted({*range(1, 11), *range(11, 20, 2)})


def test_du_counts_each_kind_where_its_bytes_are() -> None:
    checkpoints = [
        CheckpointBytes(ROOT, "a", S.OK, False, 3, 300),
        CheckpointBytes(ROOT, "a", S.CORRUPT, False, 1, 50),
        CheckpointBytes(ROOT, "a", S.TRASHED, False, 2, 200),
        CheckpointBytes(ROOT, "a", S.TRASHED, True, 1, 7),  # a trashed version: trash
        CheckpointBytes(ROOT, "a/.ckpt-versions", S.OK, True, 2, 20),
        CheckpointBytes(ROOT, "a", S.MISSING, False, 5, 5000),  # not on disk
        CheckpointBytes(ROOT, "a", S.PURGED, False, 5, 5000),
        CheckpointBytes(ROOT, "b", S.OK, False, 1, 1000),
        CheckpointBytes("/other", "c", S.OK, False, 1, 10),
        CheckpointBytes("/other", "gone", S.REMOVED, False, 1, 10),
    ]
    artifacts = [ArtifactBytes(ROOT, "a", "inference", 1, 30)]
    usage = summarize(checkpoints, artifacts)
    assert [u.root.name for u in usage] == [ROOT, "/other"]
    assert [t.name for t in usage[0].runs] == ["b", "a"]  # biggest first
    a = usage[0].runs[1]
    assert a.bytes == {"checkpoint": 350, "inference": 30, "version": 20, "trash": 207}
    assert a.files == {"checkpoint": 4, "inference": 1, "version": 2, "trash": 3}
    assert [t.name for t in usage[1].runs] == ["c"]
    doc = usage_json(usage)
    assert doc["bytes"] == 350 + 30 + 20 + 207 + 1000 + 10
    assert doc["roots"][0]["by_kind"]["checkpoint"] == 1350
    # What versions cost in all: those kept and the one in the trash (also in `trash`).
    assert doc["roots"][0]["versions"] == {
        "bytes": 27,
        "kept_bytes": 20,
        "trash_bytes": 7,
        "kept_files": 2,
        "trash_files": 1,
    }
    assert doc["roots"][0]["runs"][1]["versions"]["trash_bytes"] == 7
