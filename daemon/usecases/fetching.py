"""`ckpt fetch`: a checkpoint's bytes back from its verified remote copy.

To its own path (no `--to`): from the local trash when its tiered copy is still there (no
network: a restore), else streamed from the store beneath its root into our temp file, checked
against the catalog's hash, given the indexed mtime and renamed into place only if nothing took
the name meanwhile (`fs.fsfetch`); the row is `ok` again with the new file's identity, under the
run's lease, audited. To `--to PATH` (a file, or a folder to put it in): a new file, never
replacing one; the catalog is unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..catalog.store import Store
from ..core.errors import UsageError
from ..core.model import Checkpoint, CheckpointStatus, FileStat
from ..fs import fsfetch
from ..settings.config import Config
from . import guards, pruner, recovery
from .tiering import object_store, remote_of, require_copy

_AT_PATH = {CheckpointStatus.OK, CheckpointStatus.INCOMPLETE, CheckpointStatus.CORRUPT}


def fetch(config: Config, store: Store, ref: str, *, to: Path | None, actor: str) -> Path:
    c = store.get(ref)
    if to is not None:
        return _fetch_to(config, store, c, to)
    if c.status in _AT_PATH:
        return Path(c.path)  # already here
    trash = c.details.get("trash") or {}
    if c.status == CheckpointStatus.TRASHED and all(
        os.path.lexists(p) for p in trash.get("paths") or ["-"]
    ):
        return Path(pruner.restore(config, store, str(c.id), actor).path)
    if c.status not in (CheckpointStatus.TRASHED, CheckpointStatus.PURGED):
        raise UsageError(f"{c.path} is {c.status.value}: nothing to fetch it for")
    copy = require_copy(store, c)
    root, remote = remote_of(config, c)
    holder = f"{actor} pid {os.getpid()}"
    with store.lease(
        guards.run_id(store, c), holder, config.lease_seconds, node=config.node_name
    ) as lease:
        if lease.taken_from is not None:
            recovery.settle_events(config, store, of=lease.taken_from)
        with store.audited(
            action="fetch",
            checkpoint_id=c.id,
            path=c.path,
            reason=f"from {copy.url}",
            size=c.size_bytes,
            actor=actor,
            lease=lease,
        ):
            info = fsfetch.receive(
                Path(c.path),
                object_store(remote).download(copy.key),
                expected_hash=c.hash or copy.content_hash,
                root=root.path,
                mtime_ns=store.identity(c.id)[0].mtime_ns,
            )
            store.set_status(c.id, CheckpointStatus.OK, None, clear_trash=True)
            store.set_fetched(c.id, FileStat(info.st_size, info.st_mtime_ns, info.st_ino))
    return Path(c.path)


def _fetch_to(config: Config, store: Store, c: Checkpoint, to: Path) -> Path:
    target = Path(os.path.abspath(to))
    if target.is_dir():
        target = target / Path(c.path).name
    inside = config.root_for(target)
    if c.status in _AT_PATH:
        raise UsageError(f"{c.path} is on the local disk: copy it (fetch is from the store)")
    copy = require_copy(store, c)
    _root, remote = remote_of(config, c)
    fsfetch.receive(
        target,
        object_store(remote).download(copy.key),
        expected_hash=c.hash or copy.content_hash,
        root=inside.path if inside is not None else None,
    )
    return target
