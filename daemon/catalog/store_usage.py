"""What `ckpt du` reads: bytes of checkpoint rows and of derived files, summed per root, run,
status and kind in SQL (one pass over each table; a million rows never leave the database);
the metrics' figures (`store_figures`)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import case, func, select

from ..core.model import CheckpointStatus
from ..core.observability import Figures
from ..core.usage import ArtifactBytes, CheckpointBytes
from ..core.versions import VERSIONS_COMPONENT
from . import db, store_figures
from .rows import STATUSES
from .schema import ARTIFACTS, CHECKPOINTS, RUNS

checkpoints, artifacts, runs = CHECKPOINTS, ARTIFACTS, RUNS
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
        wanted = list(roots)
        if not wanted:
            return 0
        stmt = (
            select(func.coalesce(func.max(checkpoints.c.size_bytes), 0))
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root.in_(wanted), checkpoints.c.version_of.is_(None))
            .where(checkpoints.c.status.in_(_AT_PATH))
        )
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            return int(conn.execute(stmt).scalar() or 0)

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
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            return [(int(r[0]), str(r[1]), int(r[2] or 0)) for r in conn.execute(stmt)]

    def kept_copies_bytes(self, roots: Iterable[str]) -> int:
        """The bytes of the kept copies of rewritten files in `roots` (versions and standby
        copies at their paths): what `versions.budget` bounds (core.space_reserve)."""
        wanted = list(roots)
        if not wanted:
            return 0
        stmt = (
            select(func.coalesce(func.sum(checkpoints.c.size_bytes), 0))
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root.in_(wanted), checkpoints.c.version_of.is_not(None))
            .where(checkpoints.c.status.in_(_AT_PATH))
        )
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def figures(self, roots: Iterable[str]) -> Figures:
        """Counts, bytes, all-time totals and indexing latency for the `ckpt_*` metrics."""
        return store_figures.figures(self._engine, roots)

    def run_best_other(self, checkpoint_id: int, metric: str, mode: str) -> float | None:
        """The best `metric` of the other `ok` checkpoints of its run (`new_best` hook)."""
        return store_figures.run_best_other(self._engine, checkpoint_id, metric, mode)
