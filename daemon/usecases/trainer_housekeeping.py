"""The catalog side of `core.trainer_keeps`: whether a vanished checkpoint was rotated away by
its own trainer (HF `save_total_limit`, Lightning `save_top_k`), and which checkpoints of a run
its trainer names as its best (protected by retention). Reads folders and the catalog's details
of the newest torch-family rows; never a checkpoint file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..catalog.store import Index, Reads
from ..catalog.store_index import Known
from ..core import trainer_keeps
from ..core.model import Checkpoint, CheckpointStatus, Format

_TRAINER_FORMATS = (Format.HF_FOLDER, Format.LIGHTNING)


def removed_by_trainer(reads: Reads, index: Index, path: str, root: str) -> str | None:
    """The reason a vanished `path` (below `root`) is its trainer's housekeeping, or None
    (then: missing). The folder's rows are read from the catalog now, not from what a scan
    loaded when it began: a scan of the vanished path alone (a delete event) loads that row
    only, and the trainer's newer file may have been indexed since."""
    folder, name = os.path.split(path)
    if not trainer_keeps.may_be_rotated(name):
        return None
    if trainer_keeps.hf_rotated(name, _subfolders(folder)):
        return trainer_keeps.HF_ROTATED
    if name.endswith(".ckpt"):
        config = _newest_config(reads, folder, index.known_under(root, folder))
        if trainer_keeps.lightning_rotated(name, config):
            return trainer_keeps.LIGHTNING_ROTATED
    return None


def trainer_best(reads: Reads, found: list[Checkpoint]) -> dict[int, str]:
    """id -> why, for the checkpoints of `found` their trainer names as its best."""
    groups: dict[str, list[Checkpoint]] = {}
    for c in found:
        if c.format in _TRAINER_FORMATS and c.status == CheckpointStatus.OK:
            groups.setdefault(os.path.dirname(c.path), []).append(c)
    out: dict[int, str] = {}
    for rows in groups.values():
        newest = max(rows, key=lambda c: (c.mtime or 0.0, c.id))
        config = _config_of(reads, newest.id)
        best = trainer_keeps.hf_best(config)
        kept = trainer_keeps.lightning_kept(config) or frozenset()
        for c in rows:
            name = os.path.basename(c.path)
            if c.format == Format.HF_FOLDER and name == best:
                out[c.id] = trainer_keeps.HF_BEST
            elif c.format == Format.LIGHTNING and name in kept:
                out[c.id] = trainer_keeps.LIGHTNING_BEST
    return out


def _subfolders(folder: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _newest_config(reads: Reads, folder: str, known: Mapping[str, Known]) -> Any:
    """The training config of the newest row of `folder` whose file is still there."""
    rows = [
        (k.stat.mtime_ns, k.id)
        for p, k in known.items()
        if os.path.dirname(p) == folder and k.status == CheckpointStatus.OK and os.path.isfile(p)
    ]
    return _config_of(reads, max(rows)[1]) if rows else None


def _config_of(reads: Reads, checkpoint_id: int) -> Any:
    return (reads.get(str(checkpoint_id)).details or {}).get("training_config")
