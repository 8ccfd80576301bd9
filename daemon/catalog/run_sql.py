"""The statements of every run's summary (`ckpt runs`, the web view's overview; read by
`run_summaries`), one aggregate per figure, the same text on SQLite and PostgreSQL. Each takes
the runs it covers: None, all of them; else a list of run ids (at most `read_sql.IN_CHUNK`), the
runs whose revision moved since their summary was read."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.model import CheckpointStatus
from .read_sql import FINITE, FINITE_BOUNDS, OK, Statement

FLAGGED = (
    CheckpointStatus.INCOMPLETE.value,
    CheckpointStatus.ABANDONED.value,
    CheckpointStatus.CORRUPT.value,
    CheckpointStatus.UNREADABLE.value,
    CheckpointStatus.MISSING.value,
)
# Saves that did not complete: the last save did not complete when one of these is newer than
# the run's newest ok checkpoint.
UNFINISHED = (CheckpointStatus.INCOMPLETE.value, CheckpointStatus.ABANDONED.value)
RunIds = Sequence[int] | None
# A run's figures (count, bytes, newest, bests) are its training's: our kept copies of rewritten
# files are no checkpoint of it (issue 39: "CHECKPOINTS 22" for 10 files); `ckpt du` counts them.
NOT_A_COPY = "checkpoints.version_of IS NULL"

# Every run in the overview's order, its revision (moved by the database's triggers on any change
# to its checkpoints or metrics: migration 0009) and what was derived for it.
RUN_REVISIONS: Statement = ("SELECT id, revision, details FROM runs ORDER BY root, name", [])


def _among(column: str, runs: RunIds) -> tuple[str, list[int]]:
    if runs is None:
        return "", []
    return f" AND {column} IN ({', '.join('?' * len(runs))})", list(runs)


def run_totals(runs: RunIds) -> Statement:
    """Each run (those without an ok checkpoint too): its ok checkpoints' count, bytes, newest
    mtime."""
    among, ids = _among("runs.id", runs)
    return (
        "SELECT runs.id, runs.root, runs.name, count(checkpoints.id),"
        " coalesce(sum(checkpoints.size_bytes), 0), max(checkpoints.mtime_ns)"
        " FROM runs LEFT OUTER JOIN checkpoints ON checkpoints.run_id = runs.id"
        f" AND checkpoints.status = ? AND {NOT_A_COPY} WHERE 1 = 1{among}"
        " GROUP BY runs.id, runs.root, runs.name",
        [OK, *ids],
    )


def run_newest(runs: RunIds) -> Statement:
    """The newest ok checkpoint of each run (mtime ties: any of them; the reader keeps the
    highest id)."""
    inner, ids = _among("run_id", runs)
    outer, _ = _among("checkpoints.run_id", runs)
    return (
        "SELECT checkpoints.run_id, checkpoints.id, checkpoints.path FROM checkpoints JOIN"
        " (SELECT run_id, max(mtime_ns) AS newest FROM checkpoints WHERE status = ?"
        f" AND {NOT_A_COPY}{inner} GROUP BY run_id) AS last ON last.run_id = checkpoints.run_id"
        " AND last.newest = checkpoints.mtime_ns WHERE checkpoints.status = ?"
        f" AND {NOT_A_COPY}{outer}",
        [OK, *ids, OK, *ids],
    )


def run_metric_ranges(runs: RunIds) -> Statement:
    """Per run and metric, the lowest and highest finite value of its ok checkpoints (the mode
    picks one). CROSS JOIN: SQLite walks the run's checkpoints by index and seeks each one's
    metrics. The most costly of all: 400,000 metric rows on 100,000 checkpoints."""
    among, ids = _among("checkpoints.run_id", runs)
    return (
        "SELECT checkpoints.run_id, metrics.name, min(metrics.value), max(metrics.value)"
        " FROM checkpoints CROSS JOIN metrics WHERE metrics.checkpoint_id = checkpoints.id"
        f" AND checkpoints.status = ? AND {NOT_A_COPY}{among} AND metrics.value {FINITE}"
        " GROUP BY checkpoints.run_id, metrics.name",
        [OK, *ids, *FINITE_BOUNDS],
    )


def run_flags(runs: RunIds) -> Statement:
    """Per run, the count of each status that flags it, and the newest mtime of its unfinished
    saves."""
    among, ids = _among("run_id", runs)
    return (
        "SELECT run_id, status, count(*), max(mtime_ns) FROM checkpoints"
        f" WHERE status IN ({', '.join('?' * len(FLAGGED))}){among}"
        " GROUP BY run_id, status",
        [*FLAGGED, *ids],
    )


def metric_holders(name: str, values: Sequence[float]) -> Statement:
    """The ok checkpoints whose `name` is one of `values` (the runs' bests: an index seek each),
    with their run, path and mtime (a tie between two: the newest wins)."""
    return (
        "SELECT checkpoints.run_id, metrics.value, checkpoints.id, checkpoints.path,"
        " checkpoints.mtime_ns FROM metrics JOIN checkpoints ON checkpoints.id ="
        " metrics.checkpoint_id WHERE metrics.name = ? AND checkpoints.status = ? AND"
        f" {NOT_A_COPY} AND metrics.value IN ({', '.join('?' * len(values))})",
        [name, OK, *values],
    )
