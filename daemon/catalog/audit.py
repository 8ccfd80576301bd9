"""The catalog's one clock, one actor, one audit-event writer and one `details` patcher.

Every write that stamps a time reads `now()` here, every event row is inserted by
`record_event` (and closed by `close_event`), and every change to a checkpoint's `details` JSON
goes through `patch_details`: the audit log and the details keep one shape whoever writes them.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert, select, update

from ..core.units import iso_utc
from .schema import CHECKPOINTS, EVENTS


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(moment: dt.datetime) -> str:
    return iso_utc(moment.timestamp())


def now_iso() -> str:
    return iso(now())


def actor() -> str:
    """Who acts, for the audit log: `user@host` of this process ($CKPT_ACTOR when the service
    runs a command on its own behalf)."""
    return os.environ.get("CKPT_ACTOR") or f"{_user()}@{socket.gethostname()}"


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


def this_process() -> tuple[str, int]:
    """(host, pid) of this process: recorded on planned events and leases."""
    return socket.gethostname(), os.getpid()


def record_event(
    conn: Any,
    *,
    action: str,
    checkpoint_id: int | None,
    path: str,
    reason: str | None,
    size: int | None,
    actor: str,
    state: str = "done",
    at: str | None = None,
    process: bool = False,
) -> int:
    """Insert one audit event in the caller's transaction; returns its id. `process`: record
    this host and pid (a `planned` event of a process that died is settled by recovery)."""
    host, pid = this_process() if process else (None, None)
    key = conn.execute(
        insert(EVENTS).values(
            at=at or now_iso(),
            action=action,
            state=state,
            checkpoint_id=checkpoint_id,
            path=path,
            reason=reason,
            bytes=size,
            actor=actor,
            host=host,
            pid=pid,
            node=getattr(conn.dialect, "ckpt_node", None) or socket.gethostname(),
        )
    ).inserted_primary_key
    assert key is not None, "INSERT returned no primary key"
    return int(key[0])


def close_event(conn: Any, event_id: int, state: str, reason: str | None = None) -> None:
    """A planned event becomes `done`, `failed` or `abandoned` (with why, if given)."""
    values: dict[str, Any] = {"state": state}
    if reason:
        values["reason"] = reason
    conn.execute(update(EVENTS).where(EVENTS.c.id == event_id).values(**values))


def patch_details(
    conn: Any,
    checkpoint_id: int,
    changes: dict[str, Any] | None = None,
    *,
    drop: Iterable[str] = (),
    only_if_status: str | None = None,
    **columns: Any,
) -> bool:
    """Set `changes` and remove `drop` in a checkpoint's `details` JSON, and set `columns`, in
    the caller's transaction. `only_if_status`: only while the row has that status. Returns
    whether a row was changed."""
    row = conn.execute(  # FOR UPDATE (PostgreSQL): a read-modify-write of the JSON
        select(CHECKPOINTS.c.details, CHECKPOINTS.c.status)
        .where(CHECKPOINTS.c.id == checkpoint_id)
        .with_for_update()
    ).first()
    if row is None or (only_if_status is not None and row.status != only_if_status):
        return False
    details = dict(row.details or {})
    details.update(changes or {})
    for key in drop:
        details.pop(key, None)
    conn.execute(
        update(CHECKPOINTS)
        .where(CHECKPOINTS.c.id == checkpoint_id)
        .values(details=details, **columns)
    )
    return True
