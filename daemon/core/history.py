"""A run's metrics per epoch with each checkpoint marked: what `ckpt history` and `ckpt plot` show.

Pure: the caller hands in the run's catalog rows and what its logs hold by epoch; this module
decides the epochs shown (logged ones AND the checkpoints' ones, so the curve has no holes where
no checkpoint was kept), the value of each metric there, every checkpoint's marks, the best one
per metric (its mode as `core.query.default_mode`), the table cells and the plot's series.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .metric_names import has_direction
from .model import Checkpoint, CheckpointStatus
from .moments import rewritten_in_place
from .query import default_mode
from .table import Column, number_cells
from .text import relative_path
from .versions import VERSIONS_DIR, is_version_path

# Marks, most telling first: a checkpoint's chart glyph and plot marker is its first mark here.
MARKS = ("best", "pinned", "trashed", "missing", "version", "kept")
GLYPHS = {
    "best": "◆",
    "pinned": "▲",
    "trashed": "○",
    "missing": "×",
    "version": "◇",
    "kept": "●",
}
NO_CHECKPOINT = "•"  # a logged epoch of which no checkpoint was ever seen
# Files still at their path (a corrupt or incomplete one takes space and may be looked at).
_ON_DISK = {
    CheckpointStatus.OK,
    CheckpointStatus.INCOMPLETE,
    CheckpointStatus.CORRUPT,
    CheckpointStatus.UNREADABLE,
}
_GONE = {CheckpointStatus.MISSING, CheckpointStatus.REMOVED, CheckpointStatus.PURGED}
DEFAULT_METRICS = ("val_loss", "loss")


def versioned_run(run: str) -> str:
    """The run whose versions a run folder holds: `exp1/.ckpt-versions` (or
    `.ckpt-versions/exp1`) → `exp1`; any other run is its own."""
    parts = [p for p in run.split("/") if p != VERSIONS_DIR]
    return "/".join(parts) or "."


def members_of(run: str, rows: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The rows of `run` itself, with the versions of its checkpoints wherever they are kept."""
    return [
        c for c in rows if c.run == run or (is_version_path(c.path) and versioned_run(c.run) == run)
    ]


@dataclass(frozen=True)
class MarkedCheckpoint:
    checkpoint: Checkpoint
    marks: tuple[str, ...]  # in MARKS order
    best_for: tuple[str, ...] = ()  # the metrics it is the best checkpoint of

    @property
    def primary(self) -> str:
        return self.marks[0]


@dataclass(frozen=True)
class EpochRow:
    """One epoch (None: checkpoints of no known epoch, one row each) with its metric values
    (a name absent: not logged; NaN: logged as NaN) and the checkpoints saved at it."""

    epoch: int | None
    values: Mapping[str, float]
    checkpoints: tuple[MarkedCheckpoint, ...] = ()


@dataclass(frozen=True)
class History:
    run: str
    root: str
    metrics: tuple[tuple[str, str], ...]  # (name, mode) in the order asked
    rows: tuple[EpochRow, ...]  # by epoch; rows of no epoch last
    best: Mapping[str, int | None] = field(default_factory=dict)  # metric -> checkpoint id
    notes: tuple[str, ...] = ()

    @property
    def checkpoints(self) -> list[MarkedCheckpoint]:
        return [m for row in self.rows for m in row.checkpoints]


def chosen_metrics(
    asked: Sequence[str],
    logged: Mapping[int, Mapping[str, float]],
    rows: Sequence[Checkpoint],
    monitored: Sequence[str] = (),
) -> list[str]:
    """`--metric` as asked; else the run's monitored metrics (its keep_best) and val_loss and
    loss where the run has them; else its first metric by name with a direction (a loss, an
    accuracy: `core.metric_names`), else its first (none: an empty list)."""
    if asked:
        return list(dict.fromkeys(asked))
    present = {name for values in logged.values() for name in values}
    present |= {name for c in rows for name in c.metrics}
    found = [m for m in (*monitored, *DEFAULT_METRICS) if m in present]
    directed = sorted(name for name in present if has_direction(name))
    return list(dict.fromkeys(found)) or (directed or sorted(present))[:1]


def best_checkpoint(rows: Sequence[Checkpoint], metric: str, mode: str) -> Checkpoint | None:
    """The `ok` checkpoint with the best finite value (ties: the newest, as `ckpt best`)."""
    sign = 1.0 if mode == "min" else -1.0
    candidates = [
        c
        for c in rows
        if c.status is CheckpointStatus.OK and _finite(c.metrics.get(metric)) is not None
    ]
    if not candidates:
        return None
    # Ties: a file its trainer does not rewrite (as `ckpt best` answers), then the newest.
    return min(
        candidates,
        key=lambda c: (
            sign * float(c.metrics[metric] or 0),
            rewritten_in_place(c.path.rsplit("/", 1)[-1], c.generation),
            -c.mtime,
            -c.id,
        ),
    )


def marks_of(c: Checkpoint, best_for: Sequence[str]) -> tuple[str, ...]:
    found = {"best"} if best_for else set()
    if c.pinned:
        found.add("pinned")
    if c.status is CheckpointStatus.TRASHED:
        found.add("trashed")
    elif c.status in _GONE:
        found.add("missing")
    if is_version_path(c.path):
        found.add("version")
    elif c.status in _ON_DISK:
        found.add("kept")
    return tuple(m for m in MARKS if m in found) or ("missing",)


def build(
    run: str,
    root: str,
    rows: Sequence[Checkpoint],
    logged: Mapping[int, Mapping[str, float]],
    metrics: Sequence[str],
    notes: Sequence[str] = (),
) -> History:
    """The history of `run`: every epoch its logs or its checkpoints know, in order."""
    modes = tuple((m, default_mode(m)) for m in metrics)
    best = {m: best_checkpoint(rows, m, mode) for m, mode in modes}
    best_ids = {m: (c.id if c is not None else None) for m, c in best.items()}
    marked = []
    for c in sorted(rows, key=lambda c: (c.epoch is None, c.epoch or 0, c.mtime, c.id)):
        best_for = tuple(m for m, i in best_ids.items() if i == c.id)
        marked.append(MarkedCheckpoint(c, marks_of(c, best_for), best_for))
    by_epoch: dict[int, list[MarkedCheckpoint]] = {}
    for m in marked:
        if m.checkpoint.epoch is not None:
            by_epoch.setdefault(m.checkpoint.epoch, []).append(m)
    out = []
    for epoch in sorted(set(logged) | set(by_epoch)):
        saved = tuple(by_epoch.get(epoch, ()))
        out.append(EpochRow(epoch, _values(metrics, logged.get(epoch, {}), saved), saved))
    for m in marked:
        if m.checkpoint.epoch is None:
            out.append(EpochRow(None, _values(metrics, {}, (m,)), (m,)))
    return History(run, root, modes, tuple(out), best_ids, tuple(notes))


def _values(
    metrics: Sequence[str], logged: Mapping[str, float], saved: Sequence[MarkedCheckpoint]
) -> dict[str, float]:
    """The logged value, else the one recorded with a checkpoint of that epoch (NaN: NaN)."""
    values: dict[str, float] = {}
    for name in metrics:
        if name in logged:
            values[name] = float(logged[name])
            continue
        for m in saved:
            if name in m.checkpoint.metrics:
                value = m.checkpoint.metrics[name]
                values[name] = math.nan if value is None else float(value)
                break
    return values


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# ---- what is printed: the table, the JSON document, the plot's series ----


def glyph(m: MarkedCheckpoint, metric: str | None = None) -> str:
    """A checkpoint's chart glyph; on one metric's chart `best` only if it is that one's."""
    marks = [k for k in m.marks if k != "best" or metric is None or metric in m.best_for]
    return GLYPHS[marks[0]] if marks else GLYPHS["kept"]


def table(history: History) -> tuple[list[Column], list[list[str]]]:
    """EPOCH, one column per metric, MARKS, PATH (relative to the root): one row per
    checkpoint, an epoch's values on its first row only; an epoch without one, a row alone."""
    names = [name for name, _ in history.metrics]
    columns = [
        Column("EPOCH", align="right", keep=True),
        *(Column(name, align="right", keep=True) for name in names),
        Column("MARKS", keep=True, min_width=6),
        Column("PATH", cut="left", min_width=16),
    ]
    per_metric = [number_cells([row.values.get(name) for row in history.rows]) for name in names]
    cells: list[list[str]] = []
    for i, row in enumerate(history.rows):
        values = [column[i] for column in per_metric]
        epoch = "-" if row.epoch is None else str(row.epoch)
        if not row.checkpoints:
            cells.append([epoch, *values, NO_CHECKPOINT, ""])
        listed, folded = _fold_versions(row.checkpoints)
        for k, m in enumerate(listed):
            head = [epoch, *values] if k == 0 else ["", *([""] * len(values))]
            marks = ",".join(m.marks)
            if k == 0 and folded:  # the same epoch kept as a version too: counted, not listed
                marks += f",+{folded} version{'s' * (folded != 1)}"
            shown = f"{glyph(m)} {marks}"
            cells.append([*head, shown, relative_path(m.checkpoint.path, [history.root])])
    return columns, cells


def _fold_versions(found: Sequence[MarkedCheckpoint]) -> tuple[list[MarkedCheckpoint], int]:
    """An epoch's checkpoints as the table lists them: a kept version of a rewritten file is
    folded (counted on the epoch's first line) when a checkpoint of its own holds that epoch
    and the version is the best of nothing; else it is listed (the only record of its epoch)."""
    own = [m for m in found if m.checkpoint.version_of is None]
    if not own:
        return list(found), 0
    listed = [m for m in found if m.checkpoint.version_of is None or m.best_for]
    return listed, len(found) - len(listed)


def history_json(history: History) -> dict[str, Any]:
    """`ckpt history --json` (stable field names: add, never rename)."""
    return {
        "run": history.run,
        "root": history.root,
        "metrics": [{"name": n, "mode": mode} for n, mode in history.metrics],
        "best": dict(history.best),
        "epochs": [
            {
                "epoch": row.epoch,
                "values": {k: _finite(v) for k, v in row.values.items()},
                "checkpoints": [m.checkpoint.id for m in row.checkpoints],
            }
            for row in history.rows
        ],
        "checkpoints": [_checkpoint_json(m) for m in history.checkpoints],
        "notes": list(history.notes),
    }


def _checkpoint_json(m: MarkedCheckpoint) -> dict[str, Any]:
    c = m.checkpoint
    return {
        "id": c.id,
        "path": c.path,
        "epoch": c.epoch,
        "status": c.status.value,
        "pinned": c.pinned,
        "marks": list(m.marks),
        "best_for": list(m.best_for),
    }


@dataclass(frozen=True)
class Series:
    """One run's curve of one metric and its checkpoints as markers, as `ckpt plot` draws."""

    run: str
    metric: str
    mode: str
    line: tuple[tuple[int, float], ...]  # (epoch, finite value), by epoch
    markers: tuple[tuple[str, int, float, int], ...]  # (mark, epoch, value, checkpoint id)
    unplaced: tuple[int, ...]  # checkpoint ids without an epoch or a value there


def series(history: History, metric: str) -> Series:
    """The plot of `metric`: the line over every epoch with a finite value, one marker per
    checkpoint at its epoch's value (its first mark, `best` only for this metric)."""
    mode = dict(history.metrics).get(metric, default_mode(metric))
    line, markers, unplaced = [], [], []
    for row in history.rows:
        value = _finite(row.values.get(metric))
        if row.epoch is not None and value is not None:
            line.append((row.epoch, value))
        for m in row.checkpoints:
            if row.epoch is None or value is None:
                unplaced.append(m.checkpoint.id)
                continue
            marks = [k for k in m.marks if k != "best" or metric in m.best_for]
            markers.append((marks[0] if marks else "kept", row.epoch, value, m.checkpoint.id))
    return Series(history.run, metric, mode, tuple(line), tuple(markers), tuple(unplaced))


def series_json(s: Series) -> dict[str, Any]:
    return {
        "run": s.run,
        "metric": s.metric,
        "mode": s.mode,
        "line": [[e, v] for e, v in s.line],
        "markers": [{"mark": k, "epoch": e, "value": v, "id": i} for k, e, v, i in s.markers],
        "unplaced": list(s.unplaced),
    }
