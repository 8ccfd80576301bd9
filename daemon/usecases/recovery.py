"""After a crash: the trash folder reconciled with the catalog, planned acts of dead processes
settled, their leases dropped. Run by every scan (so by `ckpt serve` at start, `serve --once`
and the daemon's rescans) and when a command takes over the lease of a dead process.

The disk is the truth. A checkpoint in `<root>/.ckpt-trash/<batch>/` is `trashed` (restorable,
purgeable), whatever the catalog said when its mover died. A `planned` event is closed `done`
when the disk shows the act happened (whoever planned it), and `abandoned` when it did not and
the process that planned it is gone (same host, pid not alive; an event of an older catalog,
with no pid, once it is older than any lease).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..catalog.store import Store
from ..catalog.store_leases import dead_here
from ..catalog.store_recovery import PlannedEvent
from ..core.errors import UsageError
from ..core.model import CheckpointStatus
from ..core.units import iso_utc
from ..fs import discovery, fsops
from ..logs import event
from ..settings.config import Config, RootConfig
from . import trash_found, versions

LEGACY_EVENT_SECONDS = 3600.0  # planned events without a pid: older than any lease


def reconcile(config: Config, store: Store, roots: list[RootConfig] | None = None) -> None:
    """The trash folder of each root (all configured roots by default), then planned events.
    The leases of dead local processes go first: a move in flight under a live lease (another
    daemon's prune) is left to its mover, a dead one's is adopted now."""
    for host, pid in store.drop_dead_leases():
        event("lease_freed", host=host, pid=pid, reason="its process is gone")
    for root in config.roots if roots is None else roots:
        if root.path.is_dir():
            reconcile_trash(store, root)
            versions.adopt_orphans(store, root, actor="ckpt reconcile")
    settle_events(config, store)  # dead processes' acts, leased or not


def reconcile_trash(store: Store, root: RootConfig) -> list[str]:
    """Give everything found in the root's trash folder a trash record: every checkpoint a
    `trashed` row with its trash paths, and every other file there (a version file, anything a
    move of ours or of an older catalog left) a row of its own (`trash_found`), so that purge
    and the disk guard see every byte of the trash. Returns their original paths."""
    trash_dir = root.path / fsops.TRASH_DIR
    try:
        batches = sorted(
            (e for e in os.scandir(trash_dir) if e.is_dir(follow_symlinks=False)),
            key=lambda e: e.name,
        )
    except OSError:
        return []
    if not batches:
        return []
    known = store.trash_paths(str(root.path))
    adopted = []
    taken: set[Path] = set()  # the files of every checkpoint discovery finds there
    for batch in batches:
        for found in discovery.walk(Path(batch.path)):
            if not isinstance(found, discovery.Candidate):
                continue
            taken.update(found.members)
            if str(found.path) in known or str(found.members[0]) in known:
                continue  # already a trash record (or a purge in flight)
            original = trash_found.original_of(root.path, Path(batch.path), found.path)
            if trash_found.adopt_candidate(store, root, batch.name, found, original):
                adopted.append(str(original))
    known = store.trash_paths(str(root.path))  # with what was just adopted
    for batch in batches:
        batch_dir = Path(batch.path)
        for path in trash_found.unrecorded_files(batch_dir, known, taken):
            if trash_found.adopt_file(store, root, batch.name, path):
                adopted.append(str(trash_found.original_of(root.path, batch_dir, path)))
    return adopted


def settle_events(config: Config, store: Store, *, of: tuple[str, int] | None = None) -> None:
    """Close planned events whose act happened (`done`) or whose process died before it
    (`abandoned`); `of`: only those of this (host, pid). Each one closed is logged."""
    legacy_before = iso_utc(time.time() - LEGACY_EVENT_SECONDS)
    for ev in store.planned_events():
        if of is not None and (ev.host, ev.pid) != of:
            continue
        dead = dead_here(ev.host, ev.pid) or (ev.pid is None and ev.at < legacy_before)
        state = _settle(store, ev, dead)
        if state is not None:
            event("event_settled", id=ev.id, action=ev.action, state=state, path=ev.path)


def _settle(store: Store, ev: PlannedEvent, dead: bool) -> str | None:
    row = store.row_state(ev.checkpoint_id)
    trash = (row.trash if row else None) or {}
    in_trash = [os.path.lexists(p) for p in trash.get("paths", [])]
    at_home = [os.path.lexists(p) for p in trash.get("members", [])]
    moved = bool(in_trash) and all(in_trash)
    back = bool(at_home) and all(at_home) and not any(in_trash)
    gone = bool(in_trash) and not any(in_trash)
    action, settle = ev.action, store.settle
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
            settle(
                ev.id,
                "abandoned",
                checkpoint_id=key,
                expect=trashed,
                status=CheckpointStatus.OK,
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


def trashed_ref(store: Store, ref: str) -> str:
    """`ckpt trash restore REF`: an id, or the original path of a trashed checkpoint (found
    even when a new file, with its own row, is at that path now)."""
    if ref.isdigit():
        return ref
    ids = store.trashed_at(os.path.abspath(ref))
    if len(ids) > 1:
        listed = ", ".join(map(str, ids))
        raise UsageError(
            f"{len(ids)} trashed checkpoints were at {ref}: restore one by id ({listed})"
        )
    return str(ids[0]) if ids else ref
