"""Daemons in the catalog: one heartbeat row per daemon run, naming its node (`service.node`),
host and pid; a second daemon of a node that has a live one is refused (`register`); `ckpt status`
reads each node's newest row (`Reads.heartbeats`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import insert, select, update

from ..core.errors import DaemonRunning
from ..core.model import Heartbeat
from . import db
from .audit import now_iso
from .schema import HEARTBEAT

heartbeat = HEARTBEAT


class Daemons(db.Facet):
    """The heartbeat writes (the `daemons` facet)."""

    def register(
        self,
        node: str,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        is_live: Callable[[Heartbeat], bool],
    ) -> int:
        """This daemon's first heartbeat row, unless the newest one of `node` is of a daemon
        that `is_live` judges running: then DaemonRunning, and nothing written. One
        transaction (BEGIN IMMEDIATE on SQLite): two daemons of one node starting together
        cannot both register."""
        with self._engine.begin() as conn:
            db.serialize(conn, "node", node)
            beat = _newest(conn, node)
            if beat is not None and is_live(beat):
                raise DaemonRunning(
                    f"a daemon of node {node!r} is running on this catalog (pid {beat.pid} "
                    f"on {beat.host}, heartbeat {beat.heartbeat_at}): stop it, or give this "
                    "one another service.node"
                )
            values = _row(node, pid, host, started_at, state)
            return db.inserted_id(conn, insert(heartbeat).values(**values))

    def record_once(
        self,
        node: str,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        is_live: Callable[[Heartbeat], bool],
    ) -> None:
        """`serve --once`'s row, so that `ckpt status` says what last ran. Not written while the
        node's daemon runs (its own heartbeat is the status); the node's previous `--once` row
        is replaced, so that cron does not pile rows up."""
        values = _row(node, pid, host, started_at, {**state, "once": True})
        with self._engine.begin() as conn:
            db.serialize(conn, "node", node)
            beat = _newest(conn, node)
            if beat is not None and is_live(beat):
                return
            if beat is not None and beat.state.get("once"):
                conn.execute(update(heartbeat).where(heartbeat.c.id == beat.id).values(**values))
                return
            db.inserted_id(conn, insert(heartbeat).values(**values))

    def beat(
        self,
        heartbeat_id: int | None,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        node: str | None = None,
    ) -> int:
        """Record that this daemon is alive (one row per daemon run); returns the row id."""
        values = _row(node, pid, host, started_at, state)
        with self._engine.begin() as conn:
            if heartbeat_id is not None:
                done = conn.execute(
                    update(heartbeat).where(heartbeat.c.id == heartbeat_id).values(**values)
                )
                if done.rowcount:
                    return heartbeat_id
            return db.inserted_id(conn, insert(heartbeat).values(**values))


def _row(
    node: str | None, pid: int, host: str, started_at: str, state: dict[str, Any]
) -> dict[str, Any]:
    """A heartbeat row's values, beating now."""
    return {
        "node": node,
        "pid": pid,
        "host": host,
        "started_at": started_at,
        "heartbeat_at": now_iso(),
        "state": state,
    }


def _newest(conn: Any, node: str) -> Heartbeat | None:
    """The newest heartbeat row of `node`."""
    row = conn.execute(
        select(heartbeat)
        .where(heartbeat.c.node == node)
        .order_by(heartbeat.c.heartbeat_at.desc(), heartbeat.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    state = dict(row.state or {})
    return Heartbeat(row.pid, row.host, row.started_at, row.heartbeat_at, state, row.node, row.id)
