"""The remote trash's use cases: giving up remote copies (`ckpt trash remote REF...`, and
`give_up` for retention), and their rows in `ckpt trash list`, `ckpt trash restore` and
`ckpt trash purge` (the same commands as the local trash's). The acts are `rail_remote`'s.

A remote copy is never given up when it is the copy of a pinned checkpoint, or of its run's
newest, best (by any metric it logs) or last resumable checkpoint, judged over what still has
bytes somewhere (`core.remote_keep`), re-checked under the run's lease right before the move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...catalog.store import Acting, Reads, RemoteCopies
from ...core.errors import CkptError
from ...core.model import Checkpoint, TrashedCheckpoint
from ...core.remote import RemoteState, verified_copy
from ...remote.keys import TRASH_PREFIX
from ...settings.config import Config
from .. import guards, rail
from . import rail_remote
from .tiering import remote_of


@dataclass
class GiveUpReport:
    dry_run: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "items": self.items, "failures": self.failures}


def give_up(
    config: Config,
    store: Acting,
    refs: list[str],
    *,
    dry_run: bool = False,
    actor: str,
    reason: str = "by hand (ckpt trash remote)",
) -> GiveUpReport:
    report = GiveUpReport(dry_run=dry_run)
    batch = rail.batch_name("remote")
    for ref in refs:
        c = store.reads.get(ref)
        copy = verified_copy(store.remote.remote_copies([c.id]))
        kept = (
            "no verified remote copy"
            if copy is None
            else rail_remote.protected(store.reads, store.remote, c)
        )
        item: dict[str, Any] = {
            "id": c.id,
            "path": c.path,
            "action": "keep" if kept else "trash",
            "reason": kept or reason,
            "remote_url": copy.url if copy else None,
        }
        report.items.append(item)
        if dry_run or kept or copy is None:
            continue
        try:
            with rail.run_lease(config, store, guards.run_id(store.reads, c), actor) as lease:
                item["trash_url"] = rail_remote.trash_remote_copy(
                    config, store, c, copy, reason=reason, batch=batch, actor=actor, lease=lease
                )
            item["done"] = True
        except CkptError as exc:
            item["done"] = False
            report.failures.append({"id": c.id, "path": c.path, "error": guards.one_line(exc)})
    return report


def trashed(config: Config, reads: Reads, remote_copies: RemoteCopies) -> list[TrashedCheckpoint]:
    """The remote copies in the store's trash, as `trash list` rows (`location: remote`)."""
    found = []
    for copy in remote_copies.remote_copies():
        if copy.state != RemoteState.TRASHED or not copy.trash_key:
            continue
        c = reads.get(str(copy.checkpoint_id))
        try:
            trash_url = remote_of(config, c)[1].object_url(copy.trash_key)
        except CkptError:  # its root or remote is no longer configured: still listed
            trash_url = None
        info: dict[str, Any] = {
            "paths": [],
            "members": [],
            "at": copy.trashed_at or "",
            "batch": copy.trash_key.split(f"{TRASH_PREFIX}/", 1)[-1].split("/", 1)[0],
            "location": "remote",
            "remote_url": copy.url,
            "trash_url": trash_url,
            "copy_id": copy.id,
        }
        found.append(
            TrashedCheckpoint(
                c.id, c.path, c.run, c.root, copy.size_bytes, copy.reason, c.pinned, info
            )
        )
    return found


def restore(config: Config, store: Acting, c: Checkpoint, actor: str) -> bool:
    """`c`'s remote copies in the store's trash back at their keys; False if it has none."""
    mine = [
        x
        for x in store.remote.remote_copies([c.id])
        if x.state == RemoteState.TRASHED and x.trash_key
    ]
    for copy in mine:
        rail_remote.restore_remote_copy(config, store, c, copy, actor)
    return bool(mine)


def purge(
    config: Config,
    store: Acting,
    *,
    cutoff: str,
    dry_run: bool,
    actor: str,
    should_stop: Callable[[], bool],
) -> tuple[list[TrashedCheckpoint], list[dict[str, Any]]]:
    """The remote copies trashed before `cutoff` deleted for good (never a pinned one's)."""
    due = [
        t
        for t in trashed(config, store.reads, store.remote)
        if t.trashed_at <= cutoff and not t.pinned
    ]
    if dry_run:
        return due, []
    purged, failures = [], []
    by_id = {x.id: x for x in store.remote.remote_copies()}
    for item in due:
        if should_stop():
            break
        try:
            c = store.reads.get(str(item.id))
            rail_remote.purge_remote_copy(config, store, c, by_id[item.trash["copy_id"]], actor)
            purged.append(item)
        except CkptError as exc:
            failures.append({"id": item.id, "path": item.path, "error": guards.one_line(exc)})
    return purged, failures
