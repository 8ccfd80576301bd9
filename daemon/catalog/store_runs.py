"""The catalog side of run derivation (`usecases.derivation` decides): the checkpoints of one run
with what derivation needs of them, their derived epoch/step/metrics written back, and the run's
own `details` (naming schemes, steps per epoch, the metrics logs' signature)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, select, update

from ..core.model import CheckpointStatus, MetricValue
from . import change_feed, db
from .audit import patch_details
from .rows import to_record
from .schema import CHECKPOINTS, METRICS, RUNS

checkpoints, metrics, runs = CHECKPOINTS, METRICS, RUNS
# Rows of files that are (or may be) at their path: the ones a run's derivation speaks of.
_ABSENT = (
    CheckpointStatus.TRASHED.value,
    CheckpointStatus.PURGED.value,
    CheckpointStatus.MISSING.value,
    CheckpointStatus.REMOVED.value,
)


@dataclass(frozen=True)
class RunMember:
    """A checkpoint row of a run, as derivation reads it."""

    id: int
    path: str
    status: str
    hash: str | None
    iterations: int | None
    mtime_ns: int
    epoch: int | None
    step: int | None
    metrics_at: str | None
    details: dict[str, Any]
    metrics: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    format: str = ""


class Runs(db.Facet):
    """Run derivation's reads and writes (the `runs` facet)."""

    def run_members(self, root: str, run: str) -> list[RunMember]:
        """The run's checkpoints that are on disk (any status but missing/trashed/purged)."""
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            rows = conn.execute(
                select(
                    checkpoints.c.id,
                    checkpoints.c.path,
                    checkpoints.c.status,
                    checkpoints.c.hash,
                    checkpoints.c.iterations,
                    checkpoints.c.mtime_ns,
                    checkpoints.c.epoch,
                    checkpoints.c.step,
                    checkpoints.c.metrics_at,
                    checkpoints.c.details,
                    checkpoints.c.format,
                )
                .join(runs, runs.c.id == checkpoints.c.run_id)
                .where(runs.c.root == root, runs.c.name == run)
                .where(checkpoints.c.status.not_in(_ABSENT))
                .where(checkpoints.c.version_of.is_(None))  # versions: from their file's
            ).all()
            values: dict[int, dict[str, tuple[float | None, str]]] = {}
            ids = [r.id for r in rows]
            for chunk in range(0, len(ids), 500):
                for m in conn.execute(
                    select(
                        metrics.c.checkpoint_id, metrics.c.name, metrics.c.value, metrics.c.source
                    ).where(metrics.c.checkpoint_id.in_(ids[chunk : chunk + 500]))
                ):
                    values.setdefault(m.checkpoint_id, {})[m.name] = (m.value, m.source)
        return [
            to_record(
                RunMember,
                r,
                details=dict(r.details or {}),
                metrics=values.get(r.id, {}),
                format=r.format or "",
            )
            for r in rows
        ]

    def run_details(self, root: str) -> dict[str, dict[str, Any]]:
        """Each run of `root` by name: its `details` ({} when nothing was derived yet)."""
        rows = self._read(select(runs.c.name, runs.c.details).where(runs.c.root == root))
        return {r.name: dict(r.details or {}) for r in rows}

    def set_run_details(self, root: str, run: str, details: dict[str, Any]) -> None:
        with self._engine.begin() as conn:
            conn.execute(
                update(runs).where(runs.c.root == root, runs.c.name == run).values(details=details)
            )

    def set_derived_many(self, updates: Sequence[Derivation], *, at: str) -> int:
        """Derived epoch, step, metrics and `details` keys of many checkpoints, in one
        transaction. A row whose bytes changed since derivation read it (another process
        recorded a new generation meanwhile) is left alone: its values were derived for other
        bytes. Returns how many rows were written."""
        if not updates:
            return 0
        written = 0
        with self._engine.begin() as conn:
            for u in updates:
                now = conn.execute(
                    select(checkpoints.c.hash, checkpoints.c.mtime_ns)
                    .where(checkpoints.c.id == u.id)
                    .with_for_update()
                ).first()
                if now is None or (now.hash, now.mtime_ns) != (u.hash, u.mtime_ns):
                    continue
                patch_details(conn, u.id, u.details, epoch=u.epoch, step=u.step, metrics_at=at)
                replace_metrics(conn, u.id, u.metrics)
                written += 1
            if written:
                change_feed.announce(conn)  # epochs and metrics `ckpt wait` may be waiting for
        return written


def run_id_for(conn: Any, root: str, name: str, now: str) -> int:
    """The id of run (root, name), inserted if new, in the caller's write transaction."""
    query = select(runs.c.id).where(runs.c.root == root, runs.c.name == name)
    found = conn.execute(query).scalar()
    if found is None:
        db.serialize(conn, "run", root, name)  # two first sightings of one run: one insert
        found = conn.execute(query).scalar()
    if found is not None:
        return int(found)
    return db.inserted_id(conn, insert(runs).values(root=root, name=name, created_at=now))


@dataclass(frozen=True)
class Derivation:
    """What derivation found for one checkpoint, for the bytes it read (`hash`, `mtime_ns`)."""

    id: int
    hash: str | None
    mtime_ns: int
    epoch: int | None
    step: int | None
    metrics: Sequence[MetricValue]
    details: dict[str, Any]


def replace_metrics(conn: Any, ckpt_id: int, values: Sequence[MetricValue]) -> None:
    """The checkpoint's metrics become `values` (the first per name wins: callers order them by
    precedence). The results of its pipeline stages (source `stage:<name>`, recorded by
    `store_stage_jobs`) are not derived from its files or logs: they stay, and win their names."""
    stage_rows = (metrics.c.checkpoint_id == ckpt_id) & metrics.c.source.startswith("stage:")
    staged = {n for (n,) in conn.execute(select(metrics.c.name).where(stage_rows))}
    conn.execute(
        delete(metrics).where(
            metrics.c.checkpoint_id == ckpt_id, ~metrics.c.source.startswith("stage:")
        )
    )
    values = [m for m in values if m.name not in staged]
    rows = [
        {
            "checkpoint_id": ckpt_id,
            "name": m.name,
            "source": m.source,
            # Only finite values rank: NaN or +/-Infinity (a diverged epoch) is stored as NULL,
            # so it never wins `best` or keep_best, never matches --where, and reads as JSON's
            # null (which has no Infinity) in text and JSON alike.
            "value": m.value if math.isfinite(m.value) else None,
        }
        for m in dedupe(values)
    ]
    if rows:
        conn.execute(insert(metrics), rows)


def dedupe(values: Sequence[MetricValue]) -> list[MetricValue]:
    """The first value per name wins (callers order by precedence)."""
    seen: dict[str, MetricValue] = {}
    for m in values:
        seen.setdefault(m.name, m)
    return list(seen.values())
