"""The catalog side of destructive actions: audit events, claims, trash states, pins and
artifact records, and the reads these need (the trash listing, `ckpt log`, artifact lookups).

Every file action is recorded as a `planned` event (with the host and pid of the process that
plans it) before the filesystem call and marked `done` or `failed` after it, so a crash in
between leaves a trace to reconcile (`usecases.recovery` closes it `done` or `abandoned`).

Moves to the trash and purges are *claimed* first: one transaction re-reads the row's status
and pin and changes its status only if the act is still allowed, so a pin and a move are
serialized by the database (whichever commits first wins, and the other sees it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from ..core.model import CheckpointStatus, FileStat
from ..core.units import iso_utc
from . import db
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, RUNS
from .store_leases import this_process

checkpoints, events, runs = CHECKPOINTS, EVENTS, RUNS
artifacts = ARTIFACTS


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(moment: dt.datetime) -> str:
    return iso_utc(moment.timestamp())


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
        event_id = _plan_event(conn, action, checkpoint_id, path, reason, size, actor)
    try:
        yield
    except BaseException as exc:
        lines = str(exc).strip().splitlines()
        _end_event(engine, event_id, failed=lines[0] if lines else type(exc).__name__)
        raise
    _end_event(engine, event_id)


def _plan_event(
    conn: Any,
    action: str,
    checkpoint_id: int | None,
    path: str,
    reason: str | None,
    size: int | None,
    actor: str,
) -> int:
    host, pid = this_process()
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
            host=host,
            pid=pid,
        )
    ).inserted_primary_key
    assert key is not None
    return int(key[0])


def claim(
    engine: Engine,
    checkpoint_id: int,
    *,
    action: str,
    reason: str | None,
    actor: str,
    trash: dict[str, Any] | None = None,
) -> tuple[int | None, str]:
    """Claim a checkpoint for a move to the trash (`action="trash"`, `trash`: where its files
    go) or for a purge, in one transaction: only an unpinned `ok` row can be trashed, only an
    unpinned `trashed` row purged. The row takes its new status and the audit event is planned
    before any file moves. Returns (event id, "") or (None, why it was refused)."""
    status, new = (
        (CheckpointStatus.OK, CheckpointStatus.TRASHED)
        if action == "trash"
        else (CheckpointStatus.TRASHED, CheckpointStatus.PURGED)
    )
    with engine.begin() as conn:
        row = conn.execute(
            select(
                checkpoints.c.status,
                checkpoints.c.pinned,
                checkpoints.c.details,
                checkpoints.c.path,
                checkpoints.c.size_bytes,
            )
            .where(checkpoints.c.id == checkpoint_id)
            .with_for_update()
        ).first()
        if row is None:
            return None, "no longer in the catalog"
        if row.pinned:
            return None, f"{row.path} is pinned now"
        if row.status != status.value:
            return None, f"{row.path} is {row.status} now"
        details = dict(row.details or {})
        if trash is not None:
            details["trash"] = trash
        conn.execute(
            update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id)
            .values(
                status=new.value,
                reason=reason if action == "trash" else "deleted from the trash",
                details=details,
            )
        )
        return _plan_event(conn, action, checkpoint_id, row.path, reason, row.size_bytes, actor), ""


def end_claim(
    engine: Engine, event_id: int, checkpoint_id: int, *, failed: str | None = None
) -> None:
    """The claimed act is done, or failed (then the row gets its status back)."""
    with engine.begin() as conn:
        if failed is not None:
            action = conn.execute(select(events.c.action).where(events.c.id == event_id)).scalar()
            _unclaim(conn, checkpoint_id, str(action))
        close_event(conn, event_id, "failed" if failed else "done", failed)


def _unclaim(conn: Any, checkpoint_id: int, action: str) -> None:
    if action == "trash":
        row = conn.execute(
            select(checkpoints.c.details).where(checkpoints.c.id == checkpoint_id)
        ).first()
        details = dict(row.details or {}) if row else {}
        details.pop("trash", None)
        free_path(conn, checkpoint_id)
        conn.execute(
            update(checkpoints)
            .where(
                checkpoints.c.id == checkpoint_id,
                checkpoints.c.status == CheckpointStatus.TRASHED.value,
            )
            .values(status=CheckpointStatus.OK.value, reason=None, details=details)
        )
    elif action == "purge":
        conn.execute(
            update(checkpoints)
            .where(
                checkpoints.c.id == checkpoint_id,
                checkpoints.c.status == CheckpointStatus.PURGED.value,
            )
            .values(status=CheckpointStatus.TRASHED.value)
        )


def close_event(conn: Any, event_id: int, state: str, reason: str | None = None) -> None:
    values: dict[str, Any] = {"state": state}
    if reason:
        values["reason"] = reason
    conn.execute(update(events).where(events.c.id == event_id).values(**values))


def _end_event(engine: Engine, event_id: int, *, failed: str | None = None) -> None:
    with engine.begin() as conn:
        close_event(conn, event_id, "failed" if failed else "done", failed)


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
        if status not in RECORDS:
            free_path(conn, checkpoint_id)
        conn.execute(
            update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id)
            .values(status=status.value, reason=reason, details=details)
        )


RECORDS = (CheckpointStatus.TRASHED, CheckpointStatus.PURGED)


def free_path(conn: Any, checkpoint_id: int) -> None:
    """A trash record goes back to its path: a `missing` row of another file that was at that
    path meanwhile is forgotten (its events stay in the log), so the path stays unique."""
    path = select(checkpoints.c.path).where(checkpoints.c.id == checkpoint_id).scalar_subquery()
    conn.execute(
        delete(checkpoints).where(
            checkpoints.c.path == path,
            checkpoints.c.id != checkpoint_id,
            checkpoints.c.status == CheckpointStatus.MISSING.value,
        )
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


def trashed(engine: Engine, *, include_pinned: bool = True) -> list[dict[str, Any]]:
    """Trashed checkpoints with where their files are and when they went (a pinned one is
    listed, never purged)."""
    stmt = (
        select(
            checkpoints.c.id,
            checkpoints.c.path,
            checkpoints.c.size_bytes,
            checkpoints.c.reason,
            checkpoints.c.details,
            checkpoints.c.pinned,
            runs.c.name,
            runs.c.root,
        )
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(checkpoints.c.status == CheckpointStatus.TRASHED.value)
        .order_by(checkpoints.c.id)
    )
    if not include_pinned:
        stmt = stmt.where(checkpoints.c.pinned.is_(False))
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
            "pinned": bool(r.pinned),
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
