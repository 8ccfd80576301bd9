"""The catalog's side of the metrics and hooks: `figures` (counts, bytes, all-time totals from the
audit events, the indexing latency of the rows on disk) and `run_best_other` (the best value of a
metric among a run's other checkpoints, for the `new_best` hook). Read-only, one connection."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import Engine, func, select

from ..core.model import CheckpointStatus
from ..core.observability import (
    BYTE_KINDS,
    COUNTED_ACTIONS,
    DEMOTED_REASON,
    NOT_SMALLER,
    Figures,
    byte_kind,
    histogram,
    iso_seconds,
)
from . import db
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, METRICS, RUNS
from .store_remote import verified_bytes

# Rows whose bytes are no longer anywhere we count.
_GONE = (
    CheckpointStatus.PURGED.value,
    CheckpointStatus.MISSING.value,
    CheckpointStatus.REMOVED.value,
)


def figures(engine: Engine, roots: Iterable[str]) -> Figures:
    """Every figure the catalog holds for `ckpt_*` metrics; `roots` (the configured ones) get
    every byte kind, zeros included, so a dashboard's series never vanish."""
    sizes: Counter[tuple[str, str]] = Counter({(r, k): 0 for r in roots for k in BYTE_KINDS})
    latencies: list[float] = []
    with engine.connect().execution_options(**db.READONLY) as conn:
        by_status = Counter({s.value: 0 for s in CheckpointStatus})
        for status, n in conn.execute(
            select(CHECKPOINTS.c.status, func.count()).group_by(CHECKPOINTS.c.status)
        ):
            by_status[status] = int(n)
        rows = conn.execute(
            select(
                RUNS.c.root,
                CHECKPOINTS.c.path,
                CHECKPOINTS.c.status,
                CHECKPOINTS.c.size_bytes,
                CHECKPOINTS.c.mtime_ns,
                CHECKPOINTS.c.indexed_at,
            )
            .join(RUNS, RUNS.c.id == CHECKPOINTS.c.run_id)
            .where(CHECKPOINTS.c.status.not_in(_GONE))
        )
        for r in rows:
            trashed = r.status == CheckpointStatus.TRASHED.value
            kind = byte_kind(r.path, trashed)
            sizes[(r.root, kind)] += int(r.size_bytes or 0)
            if kind == "checkpoint" and r.indexed_at:  # a version is our copy, not an index
                latencies.append(iso_seconds(r.indexed_at) - r.mtime_ns / 1e9)
        artifact_bytes = conn.execute(
            select(RUNS.c.root, func.coalesce(func.sum(ARTIFACTS.c.bytes), 0))
            .join(CHECKPOINTS, CHECKPOINTS.c.id == ARTIFACTS.c.checkpoint_id)
            .join(RUNS, RUNS.c.id == CHECKPOINTS.c.run_id)
            .where(ARTIFACTS.c.kind == "inference")
            .group_by(RUNS.c.root)
        )
        for root, n in artifact_bytes:
            sizes[(root, "inference_artifact")] += int(n)
        done: Counter[str] = Counter()
        failed: Counter[str] = Counter()
        for action, state, n in conn.execute(
            select(EVENTS.c.action, EVENTS.c.state, func.count()).group_by(
                EVENTS.c.action, EVENTS.c.state
            )
        ):
            if state == "done":
                done[action] = int(n)
            elif state == "failed":
                failed[action] = int(n)
        demoted = conn.execute(
            select(func.count())
            .select_from(EVENTS)
            .where(
                EVENTS.c.action == "trash",
                EVENTS.c.state == "done",
                EVENTS.c.reason.contains(DEMOTED_REASON, autoescape=True),
            )
        ).scalar()
        # A compress that would not shrink the file is a done act too, recorded with the codec
        # it tried as `not smaller: ...` (usecases.artifacts): not counted as compressed.
        compressed = conn.execute(
            select(func.count(func.distinct(EVENTS.c.id)))
            .select_from(EVENTS)
            .join(ARTIFACTS, ARTIFACTS.c.checkpoint_id == EVENTS.c.checkpoint_id)
            .where(
                EVENTS.c.action == "compress",
                EVENTS.c.state == "done",
                ARTIFACTS.c.kind == "compressed",
                ARTIFACTS.c.codec.not_like(f"{NOT_SMALLER}%"),
            )
        ).scalar()
        remote: Counter[str] = Counter({r: 0 for r in roots_seen(sizes)})
        for root, _run, _n, size in conn.execute(verified_bytes()):
            remote[root] += int(size or 0)
        uploaded = conn.execute(
            select(func.coalesce(func.sum(EVENTS.c.bytes), 0)).where(
                EVENTS.c.action == "tier", EVENTS.c.state == "done"
            )
        ).scalar()
    totals = {name: done[action] for name, action in COUNTED_ACTIONS.items()}
    totals["demoted"] = int(demoted or 0)
    totals["compressed"] = int(compressed or 0)
    return Figures(
        by_status=dict(by_status),
        bytes=dict(sizes),
        totals=totals,
        failed=dict(failed),
        latency=histogram(latencies),
        remote_bytes=dict(remote),
        uploaded_bytes=int(uploaded or 0),
    )


def roots_seen(sizes: Counter[tuple[str, str]]) -> set[str]:
    return {root for root, _kind in sizes}


def run_best_other(engine: Engine, checkpoint_id: int, metric: str, mode: str) -> float | None:
    """The best finite `metric` among the other `ok` checkpoints of this checkpoint's own run
    (not the runs below it); None when none has it."""
    best = func.min(METRICS.c.value) if mode == "min" else func.max(METRICS.c.value)
    own_run = select(CHECKPOINTS.c.run_id).where(CHECKPOINTS.c.id == checkpoint_id)
    with engine.connect().execution_options(**db.READONLY) as conn:
        other = conn.execute(
            select(best)
            .select_from(CHECKPOINTS)
            .join(METRICS, METRICS.c.checkpoint_id == CHECKPOINTS.c.id)
            .where(
                CHECKPOINTS.c.run_id == own_run.scalar_subquery(),
                CHECKPOINTS.c.id != checkpoint_id,
                CHECKPOINTS.c.status == CheckpointStatus.OK.value,
                METRICS.c.name == metric,
                METRICS.c.value.is_not(None),
                METRICS.c.value.not_in((float("inf"), float("-inf"))),
            )
        ).scalar()
    return None if other is None else float(other)
