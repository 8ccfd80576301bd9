"""Kept versions in the catalog: a version is a checkpoint row of its own (its run, epoch,
metrics, hash) with `version_of` naming the file it was kept of (`usecases.versions` copies,
`core.versions` names). Its status is `standby` while that file still holds the same bytes (or
the same generation compressed in place since: `content_hashes`), and `ok` (a version like any
checkpoint) once the file was rewritten or is gone: `sync_standby` keeps that true in the same
transaction as every change of the file's row."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, select, update

from ..core.errors import NotFound
from ..core.model import CheckpointStatus, FileStat
from . import db
from .audit import now_iso, record_event
from .rows import to_record
from .schema import CHECKPOINTS, EVENTS, METRICS, RECORDS, RUNS, at_or_below

checkpoints, metrics, runs = CHECKPOINTS, METRICS, RUNS
OK, STANDBY = CheckpointStatus.OK.value, CheckpointStatus.STANDBY.value
CAPTURE_SKIPPED = "capture-skipped"  # the audit action of a generation not kept for space
# The audit action of a generation not copied because its content is a checkpoint kept at
# another path (`last.pt` beside `ckpt_epoch007.pt`), or a rolling pointer's (issue 39).
NOT_COPIED = "version-not-copied"
# Columns a version takes from the row of the file it keeps, as that row is when it is kept.
_COPIED = (
    "run_id",
    "format",
    "kind",
    "epoch",
    "step",
    "weights_bytes",
    "optimizer_bytes",
    "optimizer",
    "iterations",
    "n_params",
    "n_trainable_params",
    "model_class",
    "model_name",
    "keras_version",
    "backend",
    "indexed_at",
    "metrics_at",
)


@dataclass(frozen=True)
class Source:
    """A checkpoint row that may get a version kept: what the copy is checked against."""

    id: int
    path: str
    root: str
    status: str
    hash: str | None
    generation: int
    stat: FileStat
    version_of: str | None
    kept_hashes: frozenset[str]  # hashes of the versions already kept of this path (live ones)


@dataclass(frozen=True)
class VersionRow:
    id: int
    path: str
    version_of: str
    generation: int
    status: str
    hash: str | None
    mtime_ns: int


def content_hashes(current: str | None, details: dict[str, Any] | None) -> frozenset[str]:
    """The hashes a file's generation whose bytes are `current` has had: those bytes, and the
    bytes the trainer wrote before we rewrote them in place (`ckpt compress`: new bytes, the
    same generation, `record_rewrite` keeps the old hash in its `rewritten_from`). A copy of
    any of them holds what the file holds."""
    if current is None:
        return frozenset()
    entries = [g for g in (details or {}).get("generations") or [] if isinstance(g, dict)]
    entry = next((g for g in reversed(entries) if g.get("hash") == current), {})
    before = entry.get("rewritten_from")
    return frozenset([current, *(h for h in before or [] if isinstance(h, str))])


def sync_standby(conn: Any, path: str) -> None:
    """Versions of `path` that hold what the file holds now (its bytes, or its generation's
    bytes before a compress rewrote them: `content_hashes`) are `standby`; the others `ok`."""
    row = conn.execute(
        select(checkpoints.c.hash, checkpoints.c.details).where(
            checkpoints.c.path == path,
            checkpoints.c.status == OK,
            checkpoints.c.version_of.is_(None),
        )
    ).first()
    mine = checkpoints.c.version_of == path
    same = content_hashes(row.hash, row.details) if row is not None else frozenset()
    if not same:
        conn.execute(
            update(checkpoints).where(mine, checkpoints.c.status == STANDBY).values(status=OK)
        )
        return
    conn.execute(
        update(checkpoints)
        .where(mine, checkpoints.c.status == STANDBY, checkpoints.c.hash.not_in(sorted(same)))
        .values(status=OK)
    )
    conn.execute(
        update(checkpoints)
        .where(mine, checkpoints.c.status == OK, checkpoints.c.hash.in_(sorted(same)))
        .values(status=STANDBY)
    )


def _recorded_metrics(recorded: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(name, value, source) of the metrics a generation's file recorded of itself (a torch
    dict's val_loss), as derivation takes them (`source` "checkpoint")."""
    found = recorded.get("metrics")
    if not isinstance(found, dict):
        return []
    return [
        (str(k), float(v), "checkpoint")
        for k, v in found.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]


def _first_int(*values: Any) -> int | None:
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool)), None)


class Versions(db.Facet):
    """The catalog's side of kept versions (the `versions` facet)."""

    def version_source(self, checkpoint_id: int) -> Source | None:
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            row = conn.execute(
                select(
                    checkpoints.c.id,
                    checkpoints.c.path,
                    runs.c.root,
                    checkpoints.c.status,
                    checkpoints.c.hash,
                    checkpoints.c.generation,
                    checkpoints.c.size_bytes,
                    checkpoints.c.mtime_ns,
                    checkpoints.c.inode,
                    checkpoints.c.version_of,
                    checkpoints.c.details,
                )
                .join(runs, runs.c.id == checkpoints.c.run_id)
                .where(checkpoints.c.id == checkpoint_id)
            ).first()
            if row is None:
                return None
            kept = {
                h
                for h in conn.execute(
                    select(checkpoints.c.hash).where(
                        checkpoints.c.version_of == row.path,
                        checkpoints.c.status.in_((OK, STANDBY)),
                    )
                ).scalars()
                if h
            }
            if row.hash is not None and kept & content_hashes(row.hash, row.details):
                kept.add(row.hash)  # compressed since its copy was kept: the same generation
            stat = FileStat(row.size_bytes, row.mtime_ns, row.inode)
            return to_record(Source, row, stat=stat, kept_hashes=frozenset(kept))

    def add_version(
        self,
        source: Source,
        path: str,
        stat: FileStat,
        *,
        how: str,
        actor_name: str,
    ) -> int:
        """A row for the copy at `path` of generation `source.generation` (bytes
        `source.hash`). It takes the file's row as it was read: when that row holds other bytes
        by now (rewritten meanwhile, or a copy adopted after a crash), only what the file's
        generations say of those bytes (epoch, step, iterations); the next derivation adds its
        metrics."""
        now = now_iso()
        with self._engine.begin() as conn:
            db.serialize(conn, "path", path)
            there = conn.execute(  # adopted by a reconcile meanwhile: one row per version file
                select(checkpoints.c.id).where(
                    checkpoints.c.path == path, checkpoints.c.status.not_in(RECORDS)
                )
            ).scalar()
            if there is not None:
                return int(there)
            row = conn.execute(
                select(
                    *(checkpoints.c[name] for name in _COPIED),
                    checkpoints.c.details,
                    checkpoints.c.hash,
                ).where(checkpoints.c.id == source.id)
            ).first()
            if row is None:
                raise NotFound(f"no checkpoint {source.id} in the catalog")
            details = dict(row.details or {})
            generations = details.pop("generations", None) or []
            values: dict[str, Any] = {name: row._mapping[name] for name in _COPIED}
            same = source.hash in content_hashes(row.hash, row.details)  # compressed since: same
            own: dict[str, Any] = {}
            if not same:
                seen = [g for g in generations if isinstance(g, dict)]
                entry = next((g for g in seen if g.get("hash") == source.hash), {})
                # What that generation's file recorded of itself (a torch dict's epoch, step,
                # val_loss), not what the file's row holds of its newer bytes (issue 39).
                recorded = entry.get("recorded")
                details.pop("recorded", None)
                if isinstance(recorded, dict):
                    details["recorded"] = recorded
                own = recorded if isinstance(recorded, dict) else {}
                values.update(
                    epoch=_first_int(entry.get("epoch"), own.get("epoch")),
                    step=_first_int(entry.get("step"), own.get("step")),
                    iterations=entry.get("iterations"),
                    metrics_at=None,  # derived again: its metrics are its epoch's
                )
            values.update(
                path=path,
                status=STANDBY,
                reason=None,
                size_bytes=stat.size,
                mtime_ns=stat.mtime_ns,
                inode=stat.inode,
                hash=source.hash,
                generation=source.generation,
                version_of=source.path,
                details=details | {"kept_by": how},
                pinned=False,
                first_seen_at=now,
            )
            version_id = db.inserted_id(conn, insert(checkpoints).values(**values))
            copied = (
                conn.execute(
                    select(metrics.c.name, metrics.c.value, metrics.c.source).where(
                        metrics.c.checkpoint_id == source.id
                    )
                ).all()
                if same
                else _recorded_metrics(own)
            )
            if copied:
                conn.execute(
                    insert(metrics),
                    [
                        {"checkpoint_id": version_id, "name": n, "value": v, "source": src}
                        for n, v, src in copied
                    ],
                )
            record_event(
                conn,
                action="version",
                checkpoint_id=version_id,
                path=path,
                reason=f"generation {source.generation} of {source.path} kept ({how})",
                size=stat.size,
                actor=actor_name,
                at=now,
            )
            sync_standby(conn, source.path)
            return version_id

    def versions_in_run(self, root: str, run: str) -> list[VersionRow]:
        """The run's versions that are kept (ok or standby)."""
        return self._versions(and_(runs.c.root == root, runs.c.name == run))

    def versions_of(self, path: str) -> list[VersionRow]:
        return self._versions(checkpoints.c.version_of == path)

    def _versions(self, condition: Any) -> list[VersionRow]:
        rows = self._read(
            select(
                checkpoints.c.id,
                checkpoints.c.path,
                checkpoints.c.version_of,
                checkpoints.c.generation,
                checkpoints.c.status,
                checkpoints.c.hash,
                checkpoints.c.mtime_ns,
            )
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(condition, checkpoints.c.version_of.is_not(None))
            .where(checkpoints.c.status.in_((OK, STANDBY)))
            .order_by(checkpoints.c.version_of, checkpoints.c.generation)
        )
        return [VersionRow(*r) for r in rows]

    def uncaptured(self, root: str, start: str) -> dict[str, int]:
        """{path: generation} of the ok files at or below `start` in `root` whose current bytes
        have no kept copy: a capture a crash (or `versions.capture: off`, then on) left undone,
        which a scan then does."""
        kept = checkpoints.alias("kept")
        has_copy = (
            select(kept.c.id)
            .where(kept.c.version_of == checkpoints.c.path, kept.c.hash == checkpoints.c.hash)
            .where(kept.c.status.in_((OK, STANDBY)))
            .exists()
        )
        rows = self._read(
            select(checkpoints.c.path, checkpoints.c.generation)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root == root, checkpoints.c.status == OK)
            .where(checkpoints.c.version_of.is_(None), checkpoints.c.hash.is_not(None))
            .where(~has_copy, at_or_below(checkpoints.c.path, start))
        )
        return {r.path: r.generation for r in rows}

    def version_files(self, root: str) -> set[str]:
        """Paths of every version row under `root` that is not trashed or purged."""
        rows = self._read(
            select(checkpoints.c.path)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root == root, checkpoints.c.version_of.is_not(None))
            .where(checkpoints.c.status.not_in(RECORDS))
        )
        return {r.path for r in rows}

    def record_capture_skipped(
        self,
        checkpoint_id: int,
        generation: int,
        path: str,
        reason: str,
        size: int,
        actor: str,
        action: str = CAPTURE_SKIPPED,
    ) -> bool:
        """A generation of `path` not kept for lack of space (usecases.versions): an audit
        event `capture-skipped` (`ckpt log`, `ckpt_capture_skipped_total`), once per generation
        (a later scan that tries again and skips again adds none). Returns whether it is new."""
        head = f"generation {generation}: "
        with self._engine.begin() as conn:
            seen = conn.execute(
                select(EVENTS.c.id)
                .where(EVENTS.c.action == action, EVENTS.c.checkpoint_id == checkpoint_id)
                .where(EVENTS.c.reason.startswith(head, autoescape=True))
                .limit(1)
            ).first()
            if seen is not None:
                return False
            record_event(
                conn,
                action=action,
                checkpoint_id=checkpoint_id,
                path=path,
                reason=head + reason,
                size=size,
                actor=actor,
            )
        return True
