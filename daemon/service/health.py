"""Which daemons run against this catalog? Each judged from its node's last heartbeat row."""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

from ..core.model import Heartbeat
from ..fs.procfs import pid_alive

STALE_AFTER_BEATS = 3


def is_live(row: Heartbeat) -> bool:
    """A daemon that has not stopped, beats on time and, on this host, whose pid runs."""
    return _why_not_running(row, dict(row.state)) is None


def daemons_status(rows: list[Heartbeat], checkpoints: int) -> dict[str, Any]:
    """The `ckpt status --json` document over every node: `running` if any daemon is;
    `daemons`: each node's newest daemon; the other fields are those of the first running
    daemon (else the newest one)."""
    judged = [(row, _why_not_running(row, dict(row.state))) for row in rows]
    chosen = next((row for row, why in judged if why is None), rows[0] if rows else None)
    doc = daemon_status(chosen, checkpoints)
    doc["daemons"] = [
        {
            "node": row.node or row.host,
            "host": row.host,
            "pid": row.pid,
            "running": why is None,
            "reason": why,
            "started_at": row.started_at,
            "heartbeat_at": row.heartbeat_at,
            "roots": dict(row.state).get("roots", []),
        }
        for row, why in judged
    ]
    doc["running"] = any(why is None for _row, why in judged)
    return doc


def daemon_status(row: Heartbeat | None, checkpoints: int) -> dict[str, Any]:
    """The `ckpt status --json` document; `running` is false with a `reason` when it is not."""
    state = dict(row.state) if row is not None else {}
    reason = _why_not_running(row, state)
    return {
        "running": reason is None,
        "reason": reason,
        "pid": row.pid if row else None,
        "host": row.host if row else None,
        "started_at": row.started_at if row else None,
        "heartbeat_at": row.heartbeat_at if row else None,
        "roots": state.get("roots", []),
        "disk": state.get("disk", []),
        "checkpoints": checkpoints,
        "queue": state.get("queue"),
        "indexed": state.get("indexed"),
        "last_index_at": state.get("last_index_at"),
        "jobs": state.get("jobs", {}),
        "last_error": state.get("last_error"),
        # Each object store as the start probed it: {url, key, conditional_writes, aborted_uploads}
        "remotes": state.get("remotes", []),
    }


def _why_not_running(row: Heartbeat | None, state: dict[str, Any]) -> str | None:
    if row is None:
        return "no daemon has run against this catalog"
    if state.get("once"):
        return f"no daemon running: `serve --once` last ran, until {state['stopped_at']}"
    if state.get("stopped_at"):
        return f"stopped at {state['stopped_at']}"
    if row.host == socket.gethostname() and not pid_alive(int(row.pid)):
        return f"pid {row.pid} is not running (killed?)"
    beat = dt.datetime.fromisoformat(row.heartbeat_at)
    age = (dt.datetime.now(dt.UTC) - beat).total_seconds()
    limit = STALE_AFTER_BEATS * float(state.get("heartbeat_seconds") or 10)
    if age > limit:
        return f"last heartbeat {age:.0f}s ago (stale after {limit:.0f}s)"
    return None
