"""The rail's object-store half: the acts that move or delete a remote copy, each under the run's
lease (`rail.run_lease`), re-checked under it, audited (`Acts.audited`), like `usecases.rail`'s
acts on local files.

A remote copy given up is never deleted at once: it is copied server-side under the store's
trash prefix (`remote.keys.trash_key`), the copy read back (size and our metadata hash), the
catalog row marked `trashed` with where it went, and only then the original key deleted
(`remote-trash`). `ckpt trash purge` deletes it once past `trash.purge_after` (`remote-purge`);
`ckpt trash restore` copies it back to its key, reads it back and marks it `verified` again
(`remote-restore`). A kill between two steps leaves both objects (never none): the restore
takes the original if it is still there, the purge deletes it too.
"""

from __future__ import annotations

from ...catalog.store import Acting, Reads, RemoteCopies
from ...catalog.store_leases import HeldLease
from ...core.errors import Refused, RemoteFailed
from ...core.model import Checkpoint, CheckpointStatus
from ...core.query import ListQuery
from ...core.remote import RemoteCopy, RemoteState
from ...core.remote_keep import why_kept
from ...remote.keys import trash_key
from ...settings.config import Config
from .. import guards, rail
from .remote_verify import differences
from .tiering import object_store, remote_of


def _fresh(remote_copies: RemoteCopies, copy: RemoteCopy) -> RemoteCopy:
    """The copy's row as the catalog has it now (under the lease: what the act decides on)."""
    for found in remote_copies.remote_copies([copy.checkpoint_id]):
        if found.id == copy.id:
            return found
    raise Refused(f"{copy.url}: no longer recorded")


def protected(reads: Reads, remote_copies: RemoteCopies, c: Checkpoint) -> str | None:
    """Why `c`'s remote copy must stay (`core.remote_keep`), from the catalog as it is now."""
    run = [r for r in reads.list(ListQuery(run=c.run, root=c.root)) if r.run == c.run]
    copies = remote_copies.remote_copies(r.id for r in run)
    verified = {x.checkpoint_id for x in copies if x.state == RemoteState.VERIFIED}
    available = {r.id for r in run if r.status == CheckpointStatus.OK or r.id in verified}
    return why_kept(c, run, available)


def trash_remote_copy(
    config: Config,
    store: Acting,
    c: Checkpoint,
    copy: RemoteCopy,
    *,
    reason: str,
    batch: str,
    actor: str,
    lease: HeldLease,
) -> str:
    """Move a verified remote copy under the store's trash prefix, under the run's `lease` (held
    by the caller: a retention pass, `ckpt trash remote`), its protection re-checked first.
    Returns its trash URL."""
    lease.check()
    c = store.reads.get(str(c.id))
    kept = protected(store.reads, store.remote, c)
    if kept:
        raise Refused(f"{c.path}: its remote copy is kept: {kept}")
    _root, remote = remote_of(config, c)
    objects = object_store(remote)
    copy = _fresh(store.remote, copy)
    if copy.state != RemoteState.VERIFIED:
        raise Refused(f"{copy.url} is {copy.state.value}: nothing to give up")
    moved_to = trash_key(remote, copy.key, batch)
    url = remote.object_url(moved_to)
    why = f"{reason}: {copy.url} -> {url}"
    with rail.audited(store, c, "remote-trash", actor, lease, size=copy.size_bytes, reason=why):
        problem = differences(objects.head(copy.key), copy)
        if problem is not None:  # not the copy we recorded: never trusted, never moved
            state = RemoteState.MISSING if problem == "not in the store" else RemoteState.CHANGED
            store.remote.set_remote_state(copy.id, state, f"found by the remote trash: {problem}")
            raise Refused(f"{copy.url}: {problem}: marked {state.value}, not moved")
        objects.copy(copy.key, moved_to, copy.size_bytes)
        problem = differences(objects.head(moved_to), copy, checksum=False)
        if problem is not None:
            raise RemoteFailed(
                f"{url}: the trash copy does not verify ({problem}): kept at its key"
            )
        lease.check()
        store.remote.set_remote_state(copy.id, RemoteState.TRASHED, reason, trash_key=moved_to)
        objects.delete(copy.key)
    return url


def restore_remote_copy(
    config: Config, store: Acting, c: Checkpoint, copy: RemoteCopy, actor: str
) -> None:
    """A trashed remote copy back at its key, read back, `verified` again; then its trash
    object deleted. Never over another object at the key."""
    _root, remote = remote_of(config, c)
    objects = object_store(remote)
    with rail.run_lease(config, store, guards.run_id(store.reads, c), actor) as lease:
        copy = _fresh(store.remote, copy)
        if copy.state != RemoteState.TRASHED or not copy.trash_key:
            raise Refused(f"{copy.url} is {copy.state.value}, not in the store's trash")
        why = f"{remote.object_url(copy.trash_key)} -> {copy.url}"
        with rail.audited(
            store, c, "remote-restore", actor, lease, size=copy.size_bytes, reason=why
        ):
            found = objects.head(copy.key)
            if found is None:
                objects.copy(copy.trash_key, copy.key, copy.size_bytes)
                found = objects.head(copy.key)
            problem = differences(found, copy, checksum=False)
            if problem is not None:
                raise Refused(f"{copy.url}: {problem}: its trash copy is kept")
            checksum = found.checksum if found else None
            store.remote.set_remote_state(copy.id, RemoteState.VERIFIED, None, checksum=checksum)
            objects.delete(copy.trash_key)


def purge_remote_copy(
    config: Config, store: Acting, c: Checkpoint, copy: RemoteCopy, actor: str
) -> None:
    """A trashed remote copy deleted for good (and its original key, if a kill left it)."""
    _root, remote = remote_of(config, c)
    objects = object_store(remote)
    with rail.run_lease(config, store, guards.run_id(store.reads, c), actor) as lease:
        copy = _fresh(store.remote, copy)
        if copy.state != RemoteState.TRASHED or not copy.trash_key:
            raise Refused(f"{copy.url} is {copy.state.value}, not in the store's trash")
        if store.reads.get(str(c.id)).pinned:
            raise Refused(f"{c.path} is pinned: its remote copy is kept in the trash")
        why = remote.object_url(copy.trash_key)
        with rail.audited(store, c, "remote-purge", actor, lease, size=copy.size_bytes, reason=why):
            objects.delete(copy.trash_key)
            if differences(objects.head(copy.key), copy, checksum=False) is None:
                objects.delete(copy.key)  # a kill between the record and the delete left it
            store.remote.set_remote_state(copy.id, RemoteState.PURGED, copy.reason)
