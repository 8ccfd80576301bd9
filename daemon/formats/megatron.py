"""Megatron `iter_NNNNNNN/` folders, one checkpoint each: torch_dist (Megatron-Core's
`dist_checkpointing`: a DCP folder, `common.pt` and `metadata.json`) and the legacy torch
format (`mp_rank_XX[_YYY]/model_optim_rng.pt`, one torch file per model-parallel rank).

Complete by Megatron's own rules: `latest_checkpointed_iteration.txt` in the parent (written by
rank 0 once every rank has saved) names this iteration or a later one (or `release`); for
torch_dist `metadata.json` says its `sharded_backend`, `common.pt` is a whole torch zip and the
DCP part is complete (`formats.folder_saves`: `.metadata` written last, every data file whole
and not newer); for the legacy format every `mp_rank_*` folder holds a whole torch zip. What
is missing is an `UnfinishedSave` (the indexer judges `incomplete`, then `abandoned`).

The world size is the ranks that wrote data files (`__R_N.distcp` names in `.metadata`), for
the legacy format the model-parallel ranks (data-parallel replicas save nothing of their own).
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path

from ..core.errors import CorruptCheckpoint, UnfinishedSave
from ..core.model import CheckpointInfo, Format
from ..fs import beneath
from ..fs.sharded_names import (
    ITER_FOLDER,
    MEGATRON_COMMON,
    MEGATRON_CONFIG,
    MP_RANK_FOLDER,
    TRACKER,
)
from . import dcp_folder, folder_saves, torch_zip

LEGACY_FILES = ("model_optim_rng.pt", "model_rng.pt")
_MAX_SMALL = 1 << 16


def iteration_of(folder: Path) -> int:
    m = ITER_FOLDER.match(folder.name)
    if m is None:
        raise CorruptCheckpoint(f"{folder.name} is not a Megatron iter_N folder")
    return int(m[1])


def check_tracker(folder: Path, root: Path | None) -> None:
    """UnfinishedSave unless the parent's tracker names this iteration or a later one."""
    tracker_reached(folder.parent, iteration_of(folder), root, required=True)


def tracker_reached(where: Path, number: int, root: Path | None, *, required: bool) -> None:
    """UnfinishedSave unless `where`'s `latest_checkpointed_iteration.txt` names `number` or a
    later one (or `release`); without the file, UnfinishedSave only if `required` (Megatron
    always writes it; verl does, a plain FSDP loop does not)."""
    try:
        text = beneath.read_bounded(where / TRACKER, _MAX_SMALL, root)
    except FileNotFoundError:
        if not required:
            return
        raise UnfinishedSave(
            f"no {TRACKER} beside it (rank 0 writes it once every rank saved)"
        ) from None
    named = (text or b"").decode(errors="replace").strip()
    if named == "release":
        return
    if not named.isdigit():
        raise CorruptCheckpoint(f"{TRACKER} holds {named[:40]!r}, not an iteration")
    if int(named) < number:
        raise UnfinishedSave(f"{TRACKER} names {int(named)}: save {number} not finished")


def _whole_zip(path: Path, root: Path | None) -> None:
    try:
        fd = beneath.open_regular(path, root)
    except FileNotFoundError:
        raise UnfinishedSave(f"{path.name} is missing") from None
    with os.fdopen(fd, "rb") as raw:
        try:
            zipfile.ZipFile(raw).close()
        except zipfile.BadZipFile:
            raise UnfinishedSave(f"{path.name} is not a whole torch file") from None


def read_dist(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """torch_dist: the reader of `formats.folder_readers` (see module doc)."""
    try:
        raw = beneath.read_bounded(folder / MEGATRON_CONFIG, _MAX_SMALL, root)
    except FileNotFoundError:
        raise UnfinishedSave(f"no {MEGATRON_CONFIG} (Megatron-Core writes it once saved)") from None
    try:
        config = json.loads(raw or b"")
    except ValueError:
        raise CorruptCheckpoint(f"{MEGATRON_CONFIG} is not JSON") from None
    backend = config.get("sharded_backend") if isinstance(config, dict) else None
    if not isinstance(backend, str):
        raise CorruptCheckpoint(f"{MEGATRON_CONFIG} names no sharded_backend")
    if backend != "torch_dist":
        raise CorruptCheckpoint(f"{MEGATRON_CONFIG}: sharded_backend {backend!r} is not read here")
    _whole_zip(folder / MEGATRON_COMMON, root)
    info = folder_saves.read(folder, root)  # the DCP part: UnfinishedSave while in flight
    check_tracker(folder, root)
    world_size = info.world_size or dcp_folder.world_size(os.listdir(folder))
    note = f"Megatron torch_dist (sharded_backend_version {config.get('sharded_backend_version')})"
    return _as_megatron(info, folder, Format.MEGATRON_DIST, world_size, note)


def read_legacy(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """Legacy `mp_rank_XX/model_optim_rng.pt` files: rank 00's read, every rank's whole."""
    ranks = sorted(d for d in os.listdir(folder) if MP_RANK_FOLDER.match(d))
    if not ranks:
        raise CorruptCheckpoint(f"{folder.name}: no mp_rank_* folders")
    files = []
    for rank in ranks:
        names = [n for n in LEGACY_FILES if os.path.lexists(folder / rank / n)]
        if not names:
            raise UnfinishedSave(f"{rank}/ holds no {LEGACY_FILES[0]} yet")
        files.append(folder / rank / names[0])
        _whole_zip(files[-1], root)
    check_tracker(folder, root)
    fd = beneath.open_regular(files[0], root)
    with os.fdopen(fd, "rb") as raw, zipfile.ZipFile(raw) as archive:
        info = torch_zip.read_zip(archive, raw)
    note = f"Megatron legacy checkpoint: {len(ranks)} model-parallel rank file(s)"
    return _as_megatron(info, folder, Format.MEGATRON_LEGACY, len(ranks), note)


def _as_megatron(
    info: CheckpointInfo, folder: Path, fmt: Format, world_size: int | None, note: str
) -> CheckpointInfo:
    """The info read of the save's torch part, as the Megatron save it is part of: its format,
    world size, the iteration as its step, and a note first."""
    recorded = dict(info.recorded or {}) | {"step": iteration_of(folder)}
    return dataclasses.replace(
        info, format=fmt, world_size=world_size, recorded=recorded, notes=(note, *info.notes)
    )
