"""The catalog side of crash recovery (`usecases.recovery` decides from the disk): reads of
trash records and planned events, and the writes that follow: trash records for what is found in
the trash folder, planned events closed `done` or `abandoned`, and the rows they concern given
the status the disk shows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine, insert, select, update

from ..core.model import CheckpointStatus, FileStat
from ..core.units import iso_utc
from . import db, store_actions, store_leases
from .schema import CHECKPOINTS, EVENTS, RUNS

checkpoints, events, runs = CHECKPOINTS, EVENTS, RUNS


def _iso_now() -> str:
    return iso_utc(dt.datetime.now(dt.UTC).timestamp())


def run_of(engine: Engine, checkpoint_id: int) -> int:
    with engine.connect().execution_options(**db.READONLY) as conn:
        run_id = conn.execute(
            select(checkpoints.c.run_id).where(checkpoints.c.id == checkpoint_id)
        ).scalar()
    if run_id is None:
        from ..core.errors import NotFound

        raise NotFound(f"no checkpoint {checkpoint_id} in the catalog")
    return int(run_id)


def trashed_at(engine: Engine, path: str) -> list[int]:
    """Ids of the trashed checkpoints that were at `path` (several if it was trashed again)."""
    stmt = (
        select(checkpoints.c.id)
        .where(
            checkpoints.c.path == path,
            checkpoints.c.status == CheckpointStatus.TRASHED.value,
        )
        .order_by(checkpoints.c.id)
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        return [int(i) for i in conn.execute(stmt).scalars()]


def trash_paths(engine: Engine, root: str) -> set[str]:
    """Every trash path the catalog knows under `root`: trashed rows, and purges under way
    (purged rows that have a planned purge event)."""
    purging = select(events.c.checkpoint_id).where(
        events.c.action == "purge", events.c.state == "planned"
    )
    stmt = (
        select(checkpoints.c.details)
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(
            runs.c.root == root,
            (checkpoints.c.status == CheckpointStatus.TRASHED.value)
            | (
                (checkpoints.c.status == CheckpointStatus.PURGED.value)
                & checkpoints.c.id.in_(purging)
            ),
        )
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        return {
            p
            for details in conn.execute(stmt).scalars()
            for p in ((details or {}).get("trash") or {}).get("paths", [])
        }


def adopt_trashed(
    engine: Engine,
    *,
    root: str,
    run: str,
    path: str,
    stat: FileStat,
    trash: dict[str, Any],
    files: list[str],
) -> int:
    """A checkpoint found in the trash folder becomes `trashed`: the row that described those
    very files (same inode) if there is one, else a new row (unread: format unknown)."""
    now = _iso_now()
    with engine.begin() as conn:
        run_id = conn.execute(
            select(runs.c.id).where(runs.c.root == root, runs.c.name == run)
        ).scalar()
        if run_id is None:
            run_id = _new_id(conn, insert(runs).values(root=root, name=run, created_at=now))
        row = conn.execute(
            select(checkpoints.c.id, checkpoints.c.details).where(
                checkpoints.c.path == path,
                checkpoints.c.run_id == run_id,
                checkpoints.c.inode == stat.inode,
                checkpoints.c.status.not_in(
                    (CheckpointStatus.TRASHED.value, CheckpointStatus.PURGED.value)
                ),
            )
        ).first()
        reason = "found in the trash folder (the command that moved it was interrupted)"
        if row is not None:
            checkpoint_id = int(row.id)
            details = dict(row.details or {})
            details["trash"] = trash
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id == checkpoint_id)
                .values(status=CheckpointStatus.TRASHED.value, reason=reason, details=details)
            )
        else:
            details = {"trash": trash, "notes": [reason]}
            if files:
                details["files"] = files
            checkpoint_id = _new_id(
                conn,
                insert(checkpoints).values(
                    run_id=run_id,
                    path=path,
                    status=CheckpointStatus.TRASHED.value,
                    reason=reason,
                    size_bytes=stat.size,
                    mtime_ns=stat.mtime_ns,
                    inode=stat.inode,
                    generation=1,
                    pinned=False,
                    first_seen_at=now,
                    details=details,
                ),
            )
        planned = (
            conn.execute(
                select(events.c.id).where(
                    events.c.checkpoint_id == checkpoint_id,
                    events.c.action == "trash",
                    events.c.state == "planned",
                )
            )
            .scalars()
            .all()
        )
        for event_id in planned:
            store_actions.close_event(conn, event_id, "done")
        if not planned:
            host, pid = store_leases.this_process()
            conn.execute(
                insert(events).values(
                    at=now,
                    action="trash",
                    state="done",
                    checkpoint_id=checkpoint_id,
                    path=path,
                    reason=reason,
                    bytes=stat.size,
                    actor="ckpt:recovery",
                    host=host,
                    pid=pid,
                )
            )
    return checkpoint_id


def _new_id(conn: Any, statement: Any) -> int:
    key = conn.execute(statement).inserted_primary_key
    assert key is not None
    return int(key[0])


def planned_events(engine: Engine) -> list[dict[str, Any]]:
    stmt = select(
        events.c.id,
        events.c.at,
        events.c.action,
        events.c.checkpoint_id,
        events.c.path,
        events.c.host,
        events.c.pid,
    ).where(events.c.state == "planned")
    with engine.connect().execution_options(**db.READONLY) as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def row_state(engine: Engine, checkpoint_id: int | None) -> dict[str, Any] | None:
    if checkpoint_id is None:
        return None
    with engine.connect().execution_options(**db.READONLY) as conn:
        row = conn.execute(
            select(checkpoints.c.status, checkpoints.c.details, checkpoints.c.hash).where(
                checkpoints.c.id == checkpoint_id
            )
        ).first()
    if row is None:
        return None
    return {
        "id": checkpoint_id,
        "status": row.status,
        "trash": (row.details or {}).get("trash"),
        "hash": row.hash,
    }


def settle(
    engine: Engine,
    event_id: int,
    state: str,
    *,
    checkpoint_id: int | None = None,
    expect: str | None = None,
    status: CheckpointStatus | None = None,
    reason: str | None = None,
    clear_trash: bool = False,
) -> None:
    """Close a planned event (`done` / `abandoned`) and, if the row still has status `expect`,
    give it `status` (what the disk shows), in one transaction."""
    with engine.begin() as conn:
        if checkpoint_id is not None and status is not None:
            row = conn.execute(
                select(checkpoints.c.status, checkpoints.c.details).where(
                    checkpoints.c.id == checkpoint_id
                )
            ).first()
            if row is not None and row.status == expect:
                details = dict(row.details or {})
                if clear_trash:
                    details.pop("trash", None)
                if status not in store_actions.RECORDS:
                    store_actions.free_path(conn, checkpoint_id)
                conn.execute(
                    update(checkpoints)
                    .where(checkpoints.c.id == checkpoint_id)
                    .values(status=status.value, details=details, reason=_status_reason(status))
                )
        store_actions.close_event(conn, event_id, state, reason)


def _status_reason(status: CheckpointStatus) -> str | None:
    return {
        CheckpointStatus.PURGED: "deleted from the trash",
        CheckpointStatus.INCOMPLETE: "restored from the trash: read at the next scan",
    }.get(status)
