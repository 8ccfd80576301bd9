"""Trash kept in the catalog where a root cannot rename: a delayed delete.

On an object store's FUSE mount (mountpoint-s3, gcsfuse: awslabs/mountpoint-s3#1174,
GoogleCloudPlatform/gcsfuse#2570) rename(2) does not exist, and a folder on another mount than
its root's trash cannot be renamed into it (EXDEV). There a trashed checkpoint stays at its path:
its catalog row is `trashed` with a record saying so (`in_place`, `due`, the stat it had), it is
invisible to every answer and skipped by scans while it holds those bytes, `ckpt trash restore`
only clears the record, and the purge deletes it where it is when due, if it is still the very
files trashed (a trainer's new save at the same path is never deleted). The rail
(`usecases.rail`) decides it before the act when the mount table or `roots[].trash` says so,
and after it when a real rename fails so; this module only builds the record.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..catalog.store import Store
from ..core.model import Checkpoint
from ..core.units import iso_utc
from ..fs import fsops, mounts
from ..settings.config import Config


def trash_mode(config: Config, path: Path) -> mounts.TrashMode:
    """How `path`'s root trashes: `roots[].trash`, else its filesystem (`fs.mounts`)."""
    root = config.root_for(path)
    setting = root.trash if root is not None else "auto"
    return mounts.trash_mode(setting, root.path if root is not None else path)


def record(
    config: Config,
    store: Store,
    c: Checkpoint,
    root: Path,
    members: list[Path],
    trash: dict[str, Any],
    now: float,
    why: str,
) -> dict[str, Any]:
    """The trash record of a delayed delete: the files stay at their paths, recorded with the
    stat the catalog has of them (a scan skips them while they are those bytes) and the one
    fsops checks before it deletes them when `due` (never a new save at the same path)."""
    held = fsops.current_stat(root, members)
    return {
        **trash,
        "paths": [str(m) for m in members],
        "in_place": True,
        "why": why,
        "due": iso_utc(now + config.purge_after_seconds),
        "stat": list(dataclasses.astuple(store.identity(c.id)[0])),
        "members_stat": list(dataclasses.astuple(held)),
    }
