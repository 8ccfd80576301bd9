"""What `ckpt du` reads: bytes of checkpoint rows and of derived files, summed per root, run,
status and kind in SQL (one pass over each table; a million rows never leave the database);
the catalog's side of the metrics and hooks: `figures` (counts, bytes, all-time totals from the
audit events, the indexing latency of the rows on disk) and `run_best_other` (the best value of
a metric among a run's other checkpoints, for the `new_best` hook)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy import case, func, select

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
from ..core.usage import ArtifactBytes, CheckpointBytes
from ..core.versions import VERSIONS_COMPONENT
from . import db
from .rows import STATUSES
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, METRICS, RUNS
from .store_remote import verified_bytes

checkpoints, artifacts, runs, events, metrics = CHECKPOINTS, ARTIFACTS, RUNS, EVENTS, METRICS
# Rows whose file a trainer wrote and that is at its path (or being written there).
_AT_PATH = tuple(
    s.value
    for s in (
        CheckpointStatus.OK,
        CheckpointStatus.INCOMPLETE,
        CheckpointStatus.CORRUPT,
        CheckpointStatus.UNREADABLE,
    )
)
# Rows whose bytes are no longer anywhere we count.
_GONE = (
    CheckpointStatus.PURGED.value,
    CheckpointStatus.MISSING.value,
    CheckpointStatus.REMOVED.value,
)
# A `compressed` artifact is the checkpoint itself rewritten (counted with it); an artifact
# without a hash is pending: its file does not exist yet.
_IN_PLACE = "compressed"


class UsageReads(db.Facet):
    """What the catalog's bytes are and where (the `usage` facet): `ckpt du`, the guards, the
    metrics."""

    def usage(self) -> tuple[list[CheckpointBytes], list[ArtifactBytes]]:
        version = case(
            (checkpoints.c.path.contains(VERSIONS_COMPONENT, autoescape=True), True), else_=False
        ).label("version")
        by_status = (
            select(
                runs.c.root,
                runs.c.name,
                checkpoints.c.status,
                version,
                func.count(checkpoints.c.id),
                func.coalesce(func.sum(checkpoints.c.size_bytes), 0),
            )
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .group_by(runs.c.root, runs.c.name, checkpoints.c.status, version)
        )
        derived = (
            select(
                runs.c.root,
                runs.c.name,
                artifacts.c.kind,
                func.count(artifacts.c.id),
                func.coalesce(func.sum(artifacts.c.bytes), 0),
            )
            .join(checkpoints, checkpoints.c.id == artifacts.c.checkpoint_id)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(artifacts.c.kind != _IN_PLACE, artifacts.c.hash.is_not(None))
            .group_by(runs.c.root, runs.c.name, artifacts.c.kind)
        )
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            rows = conn.execute(by_status).all()
            made = conn.execute(derived).all()
        return (
            [
                CheckpointBytes(r[0], r[1], STATUSES[r[2]], bool(r[3]), r[4], int(r[5]))
                for r in rows
            ],
            [ArtifactBytes(r[0], r[1], r[2], r[3], int(r[4])) for r in made],
        )

    def largest_checkpoint(self, roots: Iterable[str]) -> int:
        """The size of the biggest file a trainer wrote in `roots` that is at its path (kept
        versions not counted): what its next save may need again (core.space_reserve)."""
        return self._at_path(roots, func.max, checkpoints.c.version_of.is_(None))

    def spare_artifacts(self, roots: Iterable[str]) -> list[tuple[int, str, int]]:
        """(checkpoint id, path, bytes) of our finished artifacts beside a checkpoint that is
        `ok` at its path in `roots`: a second copy of its weights (the disk guard's step 3).
        Not a compressed one (that is the checkpoint itself), nor a pending one."""
        wanted = list(roots)
        if not wanted:
            return []
        stmt = (
            select(artifacts.c.checkpoint_id, artifacts.c.path, artifacts.c.bytes)
            .join(checkpoints, checkpoints.c.id == artifacts.c.checkpoint_id)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root.in_(wanted), checkpoints.c.status == CheckpointStatus.OK.value)
            .where(artifacts.c.kind != _IN_PLACE, artifacts.c.hash.is_not(None))
            .order_by(artifacts.c.path)
        )
        return [(int(r[0]), str(r[1]), int(r[2] or 0)) for r in self._read(stmt)]

    def kept_copies_bytes(self, roots: Iterable[str]) -> int:
        """The bytes of the kept copies of rewritten files in `roots` (versions and standby
        copies at their paths): what `versions.budget` bounds (core.space_reserve)."""
        return self._at_path(roots, func.sum, checkpoints.c.version_of.is_not(None))

    def _at_path(self, roots: Iterable[str], aggregate: Any, which: Any) -> int:
        """`aggregate` (max, sum) of the sizes of the `which` rows at their path in `roots`."""
        wanted = list(roots)
        if not wanted:
            return 0
        stmt = (
            select(func.coalesce(aggregate(checkpoints.c.size_bytes), 0))
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root.in_(wanted), which, checkpoints.c.status.in_(_AT_PATH))
        )
        return int(self._read(stmt)[0][0] or 0)

    def figures(self, roots: Iterable[str]) -> Figures:
        """Every figure the catalog holds for `ckpt_*` metrics; `roots` (the configured ones) get
        every byte kind, zeros included, so a dashboard's series never vanish."""
        sizes: Counter[tuple[str, str]] = Counter({(r, k): 0 for r in roots for k in BYTE_KINDS})
        latencies: list[float] = []
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            by_status = Counter({s.value: 0 for s in CheckpointStatus})
            for status, n in conn.execute(
                select(checkpoints.c.status, func.count()).group_by(checkpoints.c.status)
            ):
                by_status[status] = int(n)
            rows = conn.execute(
                select(
                    runs.c.root,
                    checkpoints.c.path,
                    checkpoints.c.status,
                    checkpoints.c.size_bytes,
                    checkpoints.c.mtime_ns,
                    checkpoints.c.indexed_at,
                )
                .join(runs, runs.c.id == checkpoints.c.run_id)
                .where(checkpoints.c.status.not_in(_GONE))
            )
            for r in rows:
                trashed = r.status == CheckpointStatus.TRASHED.value
                kind = byte_kind(r.path, trashed)
                sizes[(r.root, kind)] += int(r.size_bytes or 0)
                if kind == "checkpoint" and r.indexed_at:  # a version is our copy, not an index
                    latencies.append(iso_seconds(r.indexed_at) - r.mtime_ns / 1e9)
            artifact_bytes = conn.execute(
                select(runs.c.root, func.coalesce(func.sum(artifacts.c.bytes), 0))
                .join(checkpoints, checkpoints.c.id == artifacts.c.checkpoint_id)
                .join(runs, runs.c.id == checkpoints.c.run_id)
                .where(artifacts.c.kind == "inference")
                .group_by(runs.c.root)
            )
            for root, n in artifact_bytes:
                sizes[(root, "inference_artifact")] += int(n)
            done: Counter[str] = Counter()
            failed: Counter[str] = Counter()
            for action, state, n in conn.execute(
                select(events.c.action, events.c.state, func.count()).group_by(
                    events.c.action, events.c.state
                )
            ):
                if state == "done":
                    done[action] = int(n)
                elif state == "failed":
                    failed[action] = int(n)
            demoted = conn.execute(
                select(func.count())
                .select_from(events)
                .where(
                    events.c.action == "trash",
                    events.c.state == "done",
                    events.c.reason.contains(DEMOTED_REASON, autoescape=True),
                )
            ).scalar()
            # A compress that would not shrink the file is a done act too, recorded with the codec
            # it tried as `not smaller: ...` (usecases.artifacts): not counted as compressed.
            compressed = conn.execute(
                select(func.count(func.distinct(events.c.id)))
                .select_from(events)
                .join(artifacts, artifacts.c.checkpoint_id == events.c.checkpoint_id)
                .where(
                    events.c.action == "compress",
                    events.c.state == "done",
                    artifacts.c.kind == "compressed",
                    artifacts.c.codec.not_like(f"{NOT_SMALLER}%"),
                )
            ).scalar()
            remote: Counter[str] = Counter({root: 0 for root, _kind in sizes})
            for root, _run, _n, size in conn.execute(verified_bytes()):
                remote[root] += int(size or 0)
            uploaded = conn.execute(
                select(func.coalesce(func.sum(events.c.bytes), 0)).where(
                    events.c.action == "tier", events.c.state == "done"
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

    def run_best_other(self, checkpoint_id: int, metric: str, mode: str) -> float | None:
        """The best finite `metric` among the other `ok` checkpoints of this checkpoint's own run
        (not the runs below it); None when none has it."""
        best = func.min(metrics.c.value) if mode == "min" else func.max(metrics.c.value)
        own_run = select(checkpoints.c.run_id).where(checkpoints.c.id == checkpoint_id)
        other = self._read(
            select(best)
            .select_from(checkpoints)
            .join(metrics, metrics.c.checkpoint_id == checkpoints.c.id)
            .where(
                checkpoints.c.run_id == own_run.scalar_subquery(),
                checkpoints.c.id != checkpoint_id,
                checkpoints.c.status == CheckpointStatus.OK.value,
                metrics.c.name == metric,
                metrics.c.value.is_not(None),
                metrics.c.value.not_in((float("inf"), float("-inf"))),
            )
        )[0][0]
        return None if other is None else float(other)
