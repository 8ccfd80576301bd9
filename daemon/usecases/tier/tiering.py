"""The remote tier: `ckpt tier` (and retention's `tier_after`) moves a checkpoint's bytes to the
object store and only then frees the local disk.

One tier act, on the rail (`rail.acting_on`: the run's lease, audited): the file re-checked
against the catalog (its stat), streamed up (`remote.store.ObjectStore`; S3's adapter:
multipart, bounded memory, resumed after a crash; the bytes hashed as they are read, and the
upload aborted before it completes unless they are the catalog's), the remote copy verified by
reading it back (size, the SHA-256 checksum the service computed from the parts it received,
our BLAKE3 in its metadata), recorded in the catalog, and only then the local copy re-checked
once more and moved to the local trash (claimed like a prune's move: a pin committed first
keeps it; purged after `trash.purge_after`). Anything that fails before the record leaves the
local copy where it was; a remote copy that does not verify is never recorded.

A checkpoint of several files (a TF checkpoint, every folder format) goes as one tar object
(`<name>.tar`, `remote.sources.TarSource`): generated from its recorded files as the parts are
read, deterministic (so resumed and idempotent like a file's), hashed as the catalog hashed the
files; its copy's size is the tar's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ...catalog.store import Acting, Index, RemoteCopies
from ...catalog.store_leases import HeldLease
from ...core.errors import CkptError, NotFound, RemoteFailed, UsageError
from ...core.families import folder_formats
from ...core.model import Checkpoint, CheckpointStatus, Format
from ...core.remote import RemoteCopy, verified_copy
from ...core.units import iso_utc
from ...fs import fsops
from ...logs import event
from ...remote.adapters import open_store
from ...remote.keys import object_key
from ...remote.sources import FileSource, TarSource
from ...remote.store import ObjectStore, Uploaded
from ...settings.config import Config, RootConfig
from ...settings.remote import Remote
from .. import guards, rail
from ..settlement import settle_events

# One object per checkpoint: a regular file as itself; a checkpoint of several files (a TF
# checkpoint's prefix files, every folder format) as one tar of them (`core.ustar`), generated
# as it is sent and unpacked as it is fetched.
ARCHIVE_SUFFIX = ".tar"


def is_archive(c: Checkpoint) -> bool:
    """Whether `c`'s remote copy is the tar of its files (not the file itself)."""
    return c.format == Format.TF_CHECKPOINT or c.format in folder_formats()


@cache
def object_store(remote: Remote) -> ObjectStore:
    """One client per store per process (its counters feed the metrics)."""
    return open_store(remote)


@dataclass
class TierItem:
    id: int
    path: str
    action: str  # tier | skip
    reasons: list[str]
    bytes: int
    remote_url: str | None = None
    done: bool | None = None  # None: a dry run
    resumed_parts: int = 0
    # The identical object was already at the key (another daemon's or catalog's upload, or
    # one of ours killed before its record): kept as it was, never overwritten, verified.
    kept_existing: bool = False


@dataclass
class TierReport:
    dry_run: bool
    items: list[TierItem] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "items": [
                {
                    "id": i.id,
                    "path": i.path,
                    "action": i.action,
                    "reasons": i.reasons,
                    "bytes": i.bytes,
                    "remote_url": i.remote_url,
                    **({"done": i.done} if i.done is not None else {}),
                    **({"resumed_parts": i.resumed_parts} if i.done else {}),
                    **({"kept_existing": i.kept_existing} if i.done else {}),
                }
                for i in self.items
            ],
            "failures": self.failures,
        }


def remote_of(config: Config, c: Checkpoint) -> tuple[RootConfig, Remote]:
    root = guards.configured_root(config, c)
    remote = config.remote_for(root)
    if remote is None:
        raise UsageError(f"{c.path}: no `remote:` configured for its root ({root.path})")
    return root, remote


def key_of(config: Config, c: Checkpoint) -> tuple[Remote, str]:
    root, remote = remote_of(config, c)
    if not c.hash:
        raise fsops.Refused(f"{c.path} has no content hash yet: the next scan reads it")
    relative = fsops.relative_parts(root.path, Path(c.path))
    if is_archive(c):
        relative = (*relative[:-1], relative[-1] + ARCHIVE_SUFFIX)
    return remote, object_key(remote, root.remote_name, relative, c.hash)


def why_not(config: Config, c: Checkpoint) -> str | None:
    """Why `c` cannot be tiered now (None: it can)."""
    root = config.root_for(Path(c.path))
    if root is not None and config.remote_for(root) is None:
        return "no `remote:` configured for its root"
    if c.status != CheckpointStatus.OK:
        return f"it is {c.status.value}"
    if c.pinned:
        return "it is pinned (kept local)"
    if c.version_of is not None:
        return "it is a kept version"
    if c.format is None:
        return "no format recorded"
    if not c.hash:
        return "no content hash yet (the next scan reads it)"
    return None


def tier(
    config: Config,
    store: Acting,
    refs: list[str],
    *,
    dry_run: bool = False,
    actor: str,
    reason: str = "by hand (ckpt tier)",
) -> TierReport:
    report = TierReport(dry_run=dry_run)
    if not dry_run:
        settle_events(config, store.recovery)
    for ref in refs:
        c = store.reads.get(ref)
        blocked = why_not(config, c)
        if blocked is None:
            remote, key = key_of(config, c)
            item = TierItem(c.id, c.path, "tier", [reason], c.size_bytes, remote.object_url(key))
        else:
            item = TierItem(c.id, c.path, "skip", [blocked], c.size_bytes)
        report.items.append(item)
        if dry_run or item.action == "skip":
            continue
        try:
            item.resumed_parts = tier_one(config, store, c, reason=reason, actor=actor, item=item)
            item.done = True
        except (CkptError, OSError) as exc:
            item.done = False
            report.failures.append({"id": c.id, "path": c.path, "error": guards.one_line(exc)})
            event("tier_failed", path=c.path, error=guards.one_line(exc))
    return report


def tier_one(
    config: Config,
    store: Acting,
    c: Checkpoint,
    *,
    reason: str,
    actor: str,
    lease: HeldLease | None = None,
    item: TierItem | None = None,
) -> int:
    """Upload, verify, record, then trash the local copy: on the rail (`rail.acting_on`: the
    run's lease, or `lease` held by the caller; the stat re-checked under it, the bytes hashed
    by the upload as it reads them, one pass; audited `tier`), the local copy freed under the
    same lease. Returns the parts resumed (`item`: told whether an identical object was
    already there)."""
    remote, key = key_of(config, c)
    url = remote.object_url(key)
    objects = object_store(remote)
    with rail.run_lease(config, store, guards.run_id(store.reads, c), actor, held=lease) as held:
        with rail.acting_on(
            config, store, c, "tier", actor, leased=held, reason=f"{reason}: to {url}", rehash=False
        ) as (root, members):
            started = iso_utc(time.time())
            sent = _send(store.index, objects, key, c, root, members)
            if item is not None:
                item.kept_existing = sent.existing
            store.remote.record_remote(
                c.id,
                url=url,
                endpoint=remote.endpoint_url,
                size_bytes=sent.size,
                checksum=sent.checksum,
                content_hash=sent.content_hash,
                uploaded_at=started,
            )
        event(
            "tiered",
            path=c.path,
            url=url,
            bytes=sent.size,
            resumed_parts=sent.resumed_parts,
            kept_existing=sent.existing,
        )
        free_local(config, store, c, f"tiered to {url} (verified)", actor, held)
    return sent.resumed_parts


def _send(
    index: Index, objects: ObjectStore, key: str, c: Checkpoint, root: Path, members: list[Path]
) -> Uploaded:
    """`c`'s one object sent and read back: its file, or the tar of its recorded files (their
    recorded order and names, every header's mtime the indexed one) generated as it is sent,
    verified as a file is, its expected size the tar's (headers and padding around the
    indexed bytes). An upload whose bytes are not the catalog's is aborted before it
    completes."""
    source: FileSource | TarSource
    if is_archive(c):
        expected, _digest, files = index.identity(c.id)
        if not files:
            raise fsops.Refused(f"{c.path}: no member files recorded: the next scan re-indexes it")
        source = TarSource(c.path, Path(c.path).parent, files, root, expected.mtime_ns // 10**9)
    else:
        source = FileSource(members[0], root)
    try:
        size = source.size if isinstance(source, TarSource) else c.size_bytes
        if isinstance(source, TarSource) and source.data_bytes != c.size_bytes:
            raise fsops.Refused(f"{c.path}: {source.data_bytes} bytes, indexed {c.size_bytes}")
        sent = objects.put(key, source, c.hash or "", conditional=True)
    finally:
        source.close()
    verify_uploaded(objects, sent, c, size)
    return sent


def verify_uploaded(objects: ObjectStore, sent: Uploaded, c: Checkpoint, size: int) -> None:
    """The object under the key, read back: the service's size (`size`: the file's, or the
    tar's) and checksum, our hash."""
    found = objects.head(sent.key)
    if found is None:
        raise RemoteFailed(f"{sent.key}: not in the store after its upload completed")
    problems = []
    if found.size != size or sent.size != size:
        problems.append(f"size {found.size}, expected {size}")
    if found.checksum is None:
        problems.append("the service reports no checksum")
    elif found.checksum != sent.checksum:
        problems.append(f"service checksum {found.checksum}, sent {sent.checksum}")
    if found.content_hash != c.hash:
        problems.append(f"metadata hash {found.content_hash}, catalog {c.hash}")
    if problems:
        raise RemoteFailed(f"{sent.key}: the remote copy does not verify: {'; '.join(problems)}")


def free_local(
    config: Config, store: Acting, c: Checkpoint, reason: str, actor: str, lease: HeldLease
) -> None:
    """The local copy to the local trash through the rail (re-checked right before, claimed
    like a prune's move: a pin committed first keeps it; a file that changed since it was
    indexed keeps its place, the remote copy staying recorded)."""
    if verified_copy(store.remote.remote_copies([c.id])) is None:  # never without one
        raise fsops.Refused(f"{c.path}: no verified remote copy: the local copy is kept")
    lease.check()
    batch = rail.batch_name("tier")
    rail.trash_checkpoint(config, store, c, reason=reason, batch=batch, actor=actor, lease=lease)


def require_copy(remote_copies: RemoteCopies, c: Checkpoint) -> RemoteCopy:
    found = verified_copy(remote_copies.remote_copies([c.id]))
    if found is None:
        raise NotFound(f"{c.path} has no verified remote copy")
    return found
