"""`ckpt fetch`: a checkpoint's bytes back from its verified remote copy.

To its own path (no `--to`): from the local trash when its tiered copy is still there (no
network: a restore), else streamed from the store beneath its root into our temp file, checked
against the catalog's hash, given the indexed mtime and renamed into place only if nothing took
the name meanwhile (`fs.fsfetch`); the row is `ok` again with the new file's identity, under the
run's lease, audited. To `--to PATH` (a file, or a folder to put it in): a new file, never
replacing one; the catalog is unchanged. A tar object (a checkpoint of several files) is
unpacked by `fs.fsunpack` under the recorded names, checked against the catalog's hash and
renamed into place; with `--to`, into an existing folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...catalog.store import Acting
from ...core.errors import UsageError
from ...core.model import Checkpoint, CheckpointStatus
from ...settings.config import Config
from .. import rail, trash
from ..copy_room import check_copy
from .tiering import is_archive, object_store, remote_of, require_copy

_AT_PATH = {CheckpointStatus.OK, CheckpointStatus.INCOMPLETE, CheckpointStatus.CORRUPT}


def fetch(config: Config, store: Acting, ref: str, *, to: Path | None, actor: str) -> Path:
    c = store.reads.get(ref)
    if to is not None:
        return _fetch_to(config, store, c, to)
    if c.status in _AT_PATH:
        return Path(c.path)  # already here
    in_trash = c.details.get("trash") or {}
    if c.status == CheckpointStatus.TRASHED and all(
        os.path.lexists(p) for p in in_trash.get("paths") or ["-"]
    ):
        return Path(trash.restore(config, store, str(c.id), actor).path)
    if c.status not in (CheckpointStatus.TRASHED, CheckpointStatus.PURGED):
        raise UsageError(f"{c.path} is {c.status.value}: nothing to fetch it for")
    copy = require_copy(store.remote, c)
    _root, remote = remote_of(config, c)
    check_copy(config, store.usage, Path(c.path), c.size_bytes, "the fetched copy", actor=actor)
    chunks = object_store(remote).get(copy.key)
    rail.receive_checkpoint(config, store, c, chunks, actor, copy.url, archive=is_archive(c))
    return Path(c.path)


def _fetch_to(config: Config, store: Acting, c: Checkpoint, to: Path) -> Path:
    target = Path(os.path.abspath(to))
    if c.status in _AT_PATH:
        raise UsageError(f"{c.path} is on the local disk: copy it (fetch is from the store)")
    copy = require_copy(store.remote, c)
    _root, remote = remote_of(config, c)
    check_copy(config, store.usage, target, c.size_bytes, "the fetched copy", actor="cli")
    if is_archive(c):  # its files, under their recorded names, into the folder `to`
        if not target.is_dir():
            raise UsageError(f"--to {to}: a checkpoint of several files goes into a folder")
        expected, _digest, files = store.index.identity(c.id)
        chunks = object_store(remote).get(copy.key)
        hash_ = c.hash or copy.content_hash
        rail.receive_copy(config, target, chunks, hash_, files=files, size=expected.size)
        return target / Path(c.path).name
    if target.is_dir():
        target = target / Path(c.path).name
    chunks = object_store(remote).get(copy.key)
    rail.receive_copy(config, target, chunks, c.hash or copy.content_hash)
    return target
