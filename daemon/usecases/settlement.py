"""Planned acts of dead processes settled: an audit event `planned` whose act the disk shows
happened is closed `done` (whoever planned it), one whose process is gone before it acted
`abandoned`, and the row it claimed gets the status its files say. Run by every reconcile
(`usecases.recovery`) and by the rail (`usecases.rail`) when it takes over the lease of a
killed command.
"""

from __future__ import annotations

import os
import time

from ..catalog.store import Recovery
from ..catalog.store_leases import dead_here
from ..catalog.store_recovery import PlannedEvent
from ..core.model import CheckpointStatus
from ..core.units import iso_utc
from ..logs import event
from ..settings.config import Config

LEGACY_EVENT_SECONDS = 3600.0  # planned events without a pid: older than any lease


def settle_events(config: Config, recovery: Recovery, *, of: tuple[str, int] | None = None) -> None:
    """Close planned events whose act happened (`done`) or whose process died before it
    (`abandoned`); `of`: only those of this (host, pid). Each one closed is logged."""
    legacy_before = iso_utc(time.time() - LEGACY_EVENT_SECONDS)
    for ev in recovery.planned_events():
        if of is not None and (ev.host, ev.pid) != of:
            continue
        dead = dead_here(ev.host, ev.pid) or (ev.pid is None and ev.at < legacy_before)
        state = _settle(recovery, ev, dead)
        if state is not None:
            event("event_settled", id=ev.id, action=ev.action, state=state, path=ev.path)


def _settle(recovery: Recovery, ev: PlannedEvent, dead: bool) -> str | None:
    row = recovery.row_state(ev.checkpoint_id)
    trash = (row.trash if row else None) or {}
    in_trash = [os.path.lexists(p) for p in trash.get("paths", [])]
    at_home = [os.path.lexists(p) for p in trash.get("members", [])]
    moved = bool(in_trash) and all(in_trash)
    back = bool(at_home) and all(at_home) and not any(in_trash)
    gone = bool(in_trash) and not any(in_trash)
    action, settle = ev.action, recovery.settle
    trashed, purged = CheckpointStatus.TRASHED.value, CheckpointStatus.PURGED.value
    key = ev.checkpoint_id
    if action == "trash" and moved and row and row.status == trashed:
        settle(ev.id, "done")
    elif action == "purge" and gone:
        settle(ev.id, "done", checkpoint_id=key, expect=trashed, status=CheckpointStatus.PURGED)
    elif action == "restore" and back:
        status = CheckpointStatus.OK if row and row.hash else CheckpointStatus.INCOMPLETE
        settle(ev.id, "done", checkpoint_id=key, expect=trashed, status=status, clear_trash=True)
    elif not dead:
        return None  # its process may still be at it
    else:
        why = "the process that planned it ended before it acted"
        if action == "trash" and back:  # claimed, never moved: the checkpoint is where it was
            # (one without a hash, an abandoned save, is read again, never made `ok`)
            settle(
                ev.id,
                "abandoned",
                checkpoint_id=key,
                expect=trashed,
                status=CheckpointStatus.OK if row and row.hash else CheckpointStatus.INCOMPLETE,
                clear_trash=True,
                reason=why,
            )
        elif action == "purge" and any(in_trash):  # claimed, files still in the trash
            settle(
                ev.id,
                "abandoned",
                checkpoint_id=key,
                expect=purged,
                status=CheckpointStatus.TRASHED,
                reason=why,
            )
        else:
            settle(ev.id, "abandoned", reason=why)
        return "abandoned"
    return "done"
