"""Catalog writes of destructive actions: leases, the audit log, trash states, pins.

Every file action is recorded as a `planned` event before the filesystem call and marked `done`
or `failed` after it, so a crash in between leaves a trace to reconcile.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, select, update

from daemon import db
from daemon.errors import LeaseHeld
from daemon.model import CheckpointStatus, FileStat
from daemon.schema import ARTIFACTS, CHECKPOINTS, EVENTS, LEASES, RUNS
from daemon.units import iso_utc

checkpoints, events, leases, runs = CHECKPOINTS, EVENTS, LEASES, RUNS
artifacts = ARTIFACTS


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(moment: dt.datetime) -> str:
    return iso_utc(moment.timestamp())


def acquire_lease(engine: Engine, run_id: int, holder: str, ttl_seconds: float) -> None:
    """Take the run's lease (atomically: BEGIN IMMEDIATE); raise LeaseHeld if another has it."""
    now = _now()
    with engine.begin() as conn:
        row = conn.execute(select(leases).where(leases.c.run_id == run_id)).first()
        if row is not None and row.holder != holder and row.expires_at > _iso(now):
            raise LeaseHeld(f"run is being changed by {row.holder} (lease until {row.expires_at})")
        values = {
            "holder": holder,
            "acquired_at": _iso(now),
            "expires_at": _iso(now + dt.timedelta(seconds=ttl_seconds)),
        }
        if row is None:
            conn.execute(insert(leases).values(run_id=run_id, **values))
        else:
            conn.execute(update(leases).where(leases.c.run_id == run_id).values(**values))


@contextmanager
def lease(engine: Engine, run_id: int, holder: str, ttl_seconds: float) -> Iterator[None]:
    """Hold the run's lease for the block (LeaseHeld, exit 4, if another process has it)."""
    acquire_lease(engine, run_id, holder, ttl_seconds)
    try:
        yield
    finally:
        release_lease(engine, run_id, holder)


@contextmanager
def audited(
    engine: Engine,
    *,
    action: str,
    checkpoint_id: int | None,
    path: str,
    reason: str | None,
    size: int | None,
    actor: str,
) -> Iterator[None]:
    """An audit event `planned` before the block, `done` after it, `failed` if it raises."""
    with engine.begin() as conn:
        key = conn.execute(
            insert(events).values(
                at=_iso(_now()),
                action=action,
                state="planned",
                checkpoint_id=checkpoint_id,
                path=path,
                reason=reason,
                bytes=size,
                actor=actor,
            )
        ).inserted_primary_key
    assert key is not None
    event_id = int(key[0])
    try:
        yield
    except BaseException as exc:
        lines = str(exc).strip().splitlines()
        _end_event(engine, event_id, failed=lines[0] if lines else type(exc).__name__)
        raise
    _end_event(engine, event_id)


def release_lease(engine: Engine, run_id: int, holder: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            delete(leases).where(and_(leases.c.run_id == run_id, leases.c.holder == holder))
        )


def _end_event(engine: Engine, event_id: int, *, failed: str | None = None) -> None:
    values: dict[str, Any] = {"state": "failed" if failed else "done"}
    if failed:
        values["reason"] = failed
    with engine.begin() as conn:
        conn.execute(update(events).where(events.c.id == event_id).values(**values))


def set_status(
    engine: Engine,
    checkpoint_id: int,
    status: CheckpointStatus,
    reason: str | None,
    *,
    trash: dict[str, Any] | None = None,
    clear_trash: bool = False,
) -> None:
    """Move a row to trashed / ok (restored) / purged, keeping where its files went."""
    with engine.begin() as conn:
        row = conn.execute(
            select(checkpoints.c.details).where(checkpoints.c.id == checkpoint_id)
        ).first()
        details = dict(row.details or {}) if row else {}
        if trash is not None:
            details["trash"] = trash
        elif clear_trash:
            details.pop("trash", None)
        conn.execute(
            update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id)
            .values(status=status.value, reason=reason, details=details)
        )


def add_artifact(
    engine: Engine,
    checkpoint_id: int,
    *,
    kind: str,
    path: str,
    size: int,
    codec: str | None,
    digest: str | None,
) -> None:
    """Register a file we derived from a checkpoint (replacing an older one at that path);
    `digest` None: pending, registered before the file gets its name."""
    with engine.begin() as conn:
        conn.execute(delete(artifacts).where(artifacts.c.path == path))
        conn.execute(
            insert(artifacts).values(
                checkpoint_id=checkpoint_id,
                kind=kind,
                path=path,
                bytes=size,
                codec=codec,
                hash=digest,
                created_at=_iso(_now()),
            )
        )


def forget_artifact(engine: Engine, path: str) -> None:
    """Drop the artifact row of `path` (a pending one whose file was never written)."""
    with engine.begin() as conn:
        conn.execute(delete(artifacts).where(artifacts.c.path == path))


def ids_with_artifact(engine: Engine, kind: str) -> set[int]:
    with engine.connect().execution_options(**db.READONLY) as conn:
        return set(
            conn.execute(
                select(artifacts.c.checkpoint_id).where(artifacts.c.kind == kind)
            ).scalars()
        )


def record_rewrite(
    engine: Engine, checkpoint_id: int, *, stat: FileStat, digest: str, codec: str
) -> None:
    """A checkpoint we rewrote in place (compressed): same content, new bytes on disk."""
    with engine.begin() as conn:
        row = conn.execute(
            select(checkpoints.c.details).where(checkpoints.c.id == checkpoint_id)
        ).first()
        details = dict(row.details or {}) if row else {}
        details["codec"] = codec
        conn.execute(
            update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id)
            .values(
                size_bytes=stat.size,
                mtime_ns=stat.mtime_ns,
                inode=stat.inode,
                hash=digest,
                details=details,
            )
        )


def artifact_paths(engine: Engine, start: str) -> set[str]:
    """Paths of our derived files at or below `start`: never indexed as new checkpoints.
    (A `compressed` artifact is the checkpoint itself, rewritten: not one of them.)"""
    path = artifacts.c.path
    stmt = select(path).where(
        (artifacts.c.kind != "compressed")
        & ((path == start) | ((path >= start + "/") & (path < start + "0")))
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        return set(conn.execute(stmt).scalars())


def set_pinned(engine: Engine, checkpoint_id: int, pinned: bool, actor: str) -> bool:
    """Returns whether it changed."""
    with engine.begin() as conn:
        row = conn.execute(
            select(checkpoints.c.pinned, checkpoints.c.path).where(
                checkpoints.c.id == checkpoint_id
            )
        ).first()
        if row is None or bool(row.pinned) == pinned:
            return False
        conn.execute(
            update(checkpoints).where(checkpoints.c.id == checkpoint_id).values(pinned=pinned)
        )
        conn.execute(
            insert(events).values(
                at=_iso(_now()),
                action="pin" if pinned else "unpin",
                state="done",
                checkpoint_id=checkpoint_id,
                path=row.path,
                reason=None,
                bytes=None,
                actor=actor,
            )
        )
    return True


def trashed(engine: Engine) -> list[dict[str, Any]]:
    """Trashed checkpoints with where their files are and when they went."""
    stmt = (
        select(
            checkpoints.c.id,
            checkpoints.c.path,
            checkpoints.c.size_bytes,
            checkpoints.c.reason,
            checkpoints.c.details,
            runs.c.name,
            runs.c.root,
        )
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(checkpoints.c.status == CheckpointStatus.TRASHED.value)
        .order_by(checkpoints.c.id)
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        rows = conn.execute(stmt).all()
    return [
        {
            "id": r.id,
            "path": r.path,
            "run": r.name,
            "root": r.root,
            "bytes": r.size_bytes,
            "reason": r.reason,
            **(r.details or {}).get("trash", {}),
        }
        for r in rows
    ]


def audit_log(
    engine: Engine, run: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    stmt = (
        select(events, runs.c.name.label("run"))
        .join(checkpoints, checkpoints.c.id == events.c.checkpoint_id, isouter=True)
        .join(runs, runs.c.id == checkpoints.c.run_id, isouter=True)
        .order_by(events.c.id.desc())
    )
    if run is not None:
        stmt = stmt.where(runs.c.name == run)
    if limit is not None:
        stmt = stmt.limit(limit)
    with engine.connect().execution_options(**db.READONLY) as conn:
        rows = conn.execute(stmt).all()
    return [
        {
            "id": r.id,
            "at": r.at,
            "action": r.action,
            "state": r.state,
            "checkpoint_id": r.checkpoint_id,
            "run": r.run,
            "path": r.path,
            "reason": r.reason,
            "bytes": r.bytes,
            "actor": r.actor,
        }
        for r in reversed(rows)
    ]
