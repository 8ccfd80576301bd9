"""Consolidate a sharded save into one safetensors of the full model (or shards with an index),
without torch: a DCP folder, a Megatron torch_dist `iter_N/` (DCP too), a folder of FSDP2 /
verl per-rank torch files, a legacy Megatron `iter_N/` of one model-parallel rank. Only the
model's tensors go in (never optimizer state), each in the dtype it was saved in.

Where each piece is, from metadata alone: DCP's `.metadata` gives each tensor's global shape,
its chunks (offsets, sizes) and, per chunk, the byte range of its item in a `__R_N.distcp` file
(`storage_data`). With the default serialization each item is a small `torch.save` zip of its
own (its storage member is read where it lies, through the item's pickle record: shape,
stride, offset); an item of raw bytes is the chunk contiguous. Items with
`transform_descriptors` (compressed, encrypted) and data files in DCP's safetensors
serialization are refused. A per-rank file's DTensor records give each rank's piece
(`formats.rank_files`). Pieces must tile their tensor exactly (`core.tiling`), else refused.

The output is written in order (`transforms.safetensors_out`), each tensor's bytes assembled
a block of rows at a time by byte copies (`transforms.tensor_blocks`): memory stays one block
whatever the model's size.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import IO, cast

import numpy as np

from ..core.errors import CorruptCheckpoint, UsageError
from ..core.model import Format
from ..core.tiling import check_tiles
from ..formats import (
    dcp_folder,
    pickle_safe,
    rank_files,
    safetensors_file,
    torch_state,
    torch_zip,
    window,
)
from ..formats.megatron import LEGACY_FILES
from ..formats.pickle_safe import Opaque, StorageRef, TensorRecord
from ..fs import beneath, folder_layouts, fsops
from ..fs.sharded_names import MP_RANK_FOLDER
from . import safetensors_out
from .safetensors_out import Tensor, dtype_code
from .split import SplitResult
from .tensor_blocks import Chunk, OpenFiles, Planned, row_major, storage_starts, tensor_bytes

SUFFIX = ".consolidated.safetensors"
SHARD_BYTES = 5 * 10**9  # the Hugging Face default `max_shard_size` ("5GB")
CONSOLIDATED = (Format.TORCH_DCP, Format.MEGATRON_DIST, Format.TORCH_RANKS, Format.MEGATRON_LEGACY)
_OPTIMIZER = re.compile(r"^(optim|optimizer|optim_state|optimizer_state)\.")


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`step-3/` -> `step-3.consolidated.safetensors` beside it (or in `out_dir`)."""
    return (out_dir if out_dir is not None else source.parent) / f"{source.name}{SUFFIX}"


def split(
    root: Path,
    source: Path,
    fmt: Format | None = None,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    keep_compile: bool = False,  # every splitter's signature: a sharded save compiles nothing
    source_hash: str | None = None,
    shard_bytes: int | None = SHARD_BYTES,
) -> SplitResult:
    """Write the consolidated model of the sharded checkpoint folder `source` (below `root`),
    a save of format `fmt` (None: the layout that claims the folder says, `fs.folder_layouts`)."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    if fmt is None:
        claimed = folder_layouts.claim_of(source)
        fmt = Format(claimed.family) if claimed is not None else None
    if fmt not in CONSOLIDATED:
        raise UsageError(f"not split: {source} is not a sharded save consolidated here")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])
    planner = {Format.TORCH_RANKS: plan_ranks, Format.MEGATRON_LEGACY: plan_legacy}
    plan = planner.get(fmt, plan_dcp)(source, root)
    if not plan:
        raise UsageError(f"not split: {source} holds no model tensors")
    by_name = {p.out.name: p for p in plan}
    with OpenFiles(source, root) as files:
        return safetensors_out.write_inference(
            root,
            source,
            final,
            [p.out for p in plan],
            lambda t: tensor_bytes(by_name[t.name], files.fd),
            before=before,
            like=source / plan[0].chunks[0].file,  # its mode and times
            source_hash=source_hash,
            replacing=replacing,
            shard_bytes=shard_bytes,
        )


# ---- where the pieces are ----


def plan_dcp(folder: Path, root: Path | None) -> list[Planned]:
    """The model tensors of a DCP folder (a Megatron torch_dist one too), optimizer left out;
    FSDP's `get_state_dict` layout (`model.` + `optim.`) loses its `model.` prefix."""
    dcp = dcp_folder.read_folder(folder, root)
    if dcp.problems:
        raise UsageError(f"not split: {folder} is not a complete DCP save ({dcp.problems[0]})")
    items = _storage_items(folder, root)
    model = [t for t in dcp.tensors if not _OPTIMIZER.match(t.key)]
    strip = bool(model) and all(t.key.startswith("model.") for t in model)
    plan = []
    for t in model:
        name = t.key.removeprefix("model.") if strip else t.key
        out = Tensor(name, dtype_code(name, t.dtype), t.shape)
        pieces = []
        for offsets, sizes in t.chunks:
            where = items.get((t.key, offsets))
            if where is None:
                raise CorruptCheckpoint(f"{t.key}: no stored item for its chunk at {offsets}")
            pieces.append(_dcp_chunk(folder, root, t.key, t.dtype, sizes, offsets, *where))
        plan.append(Planned(out, pickle_safe.ITEM_SIZES[t.dtype], _tiled(out, pieces)))
    return plan


def _storage_items(
    folder: Path, root: Path | None
) -> dict[tuple[str, tuple[int, ...]], tuple[str, int, int]]:
    """{(fqn, chunk offsets): (data file, byte offset, length)} from `.metadata`."""
    data = beneath.read_bounded(folder / dcp_folder.METADATA, pickle_safe.MAX_PICKLE_BYTES, root)
    if data is None:
        raise CorruptCheckpoint(".metadata is too big to read")
    record, _ops = pickle_safe.read(data)
    state = record.state if isinstance(record, Opaque) and isinstance(record.state, dict) else {}
    items = {}
    for index, info in (state.get("storage_data") or {}).items():
        key = index.state if isinstance(index, Opaque) and isinstance(index.state, dict) else {}
        where = info.state if isinstance(info, Opaque) and isinstance(info.state, dict) else {}
        if where.get("transform_descriptors"):
            raise UsageError(
                f"not split: {key.get('fqn')} is stored through "
                f"{where['transform_descriptors']} (compressed or transformed items are not read)"
            )
        name, offset, length = where.get("relative_path"), where.get("offset"), where.get("length")
        if not (isinstance(name, str) and dcp_folder.DATA_FILE.match(name)):
            raise CorruptCheckpoint(f".metadata names a data file {name!r}")
        if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
            raise CorruptCheckpoint(f".metadata: a bad byte range for {key.get('fqn')}")
        items[(str(key.get("fqn")), tuple(key.get("offset") or ()))] = (name, offset, length)
    return items


def _dcp_chunk(
    folder: Path,
    root: Path | None,
    key: str,
    dtype: str,
    sizes: tuple[int, ...],
    offsets: tuple[int, ...],
    name: str,
    at: int,
    length: int,
) -> Chunk:
    fd = beneath.open_regular(folder / name, root)
    with os.fdopen(fd, "rb") as raw:
        if os.fstat(raw.fileno()).st_size < at + length:
            raise CorruptCheckpoint(f"{name} ends before {key}'s item")
        head = raw.read(9)
        if safetensors_file.looks_like(head, os.fstat(raw.fileno()).st_size):
            raise UsageError(  # its ranges count from the data after a header: not read here
                f"not split: {name} is a safetensors file (DCP's safetensors serialization)"
            )
        raw.seek(at)
        if raw.read(4) != b"PK\x03\x04":  # DCP's raw serialization: the chunk's bytes
            numel = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
            if length != numel * pickle_safe.ITEM_SIZES[dtype]:
                raise CorruptCheckpoint(f"{key}: an item of {length} bytes for {sizes} {dtype}")
            dense = TensorRecord(
                dtype, sizes, row_major(sizes), 0, StorageRef("raw", dtype, numel, "cpu")
            )
            return Chunk(name, at, dense, offsets)
        item = cast(IO[bytes], window.Window(raw, at, length))
        try:
            archive = zipfile.ZipFile(item)
        except zipfile.BadZipFile as exc:
            raise CorruptCheckpoint(f"{key}: its item in {name} is no torch zip ({exc})") from None
        with archive:
            member = torch_zip.pickle_member(archive)
            if member is None:
                raise CorruptCheckpoint(f"{key}: its item in {name} is no torch file")
            record = pickle_safe.load(window.read_member(archive, member, 1 << 20))
            if not isinstance(record, TensorRecord) or record.storage is None:
                raise CorruptCheckpoint(f"{key}: its item in {name} holds no tensor")
            if record.shape != sizes or record.dtype != dtype:
                raise CorruptCheckpoint(f"{key}: item {record.shape} {record.dtype}, chunk {sizes}")
            start = at + storage_starts(item, archive, [(key, record)], name)[key]
    return Chunk(name, start, record, offsets)


def plan_ranks(folder: Path, root: Path | None) -> list[Planned]:
    """The model of a folder of per-rank files, each rank's DTensor piece where it lies."""
    tensors = rank_files.model_tensors(rank_files.rank_set(folder), root)
    by_file: dict[str, list[tuple[str, TensorRecord]]] = {}
    for t in tensors:
        for piece in t.pieces:
            by_file.setdefault(piece.file, []).append((t.name, piece.record))
    starts = {name: _starts(folder / name, root, wanted) for name, wanted in by_file.items()}
    plan = []
    for t in tensors:
        out = Tensor(t.name, dtype_code(t.name, t.dtype), t.shape)
        pieces = [Chunk(p.file, starts[p.file][t.name], p.record, p.offsets) for p in t.pieces]
        plan.append(Planned(out, pickle_safe.ITEM_SIZES[t.dtype], _tiled(out, pieces)))
    return plan


def plan_legacy(folder: Path, root: Path | None) -> list[Planned]:
    """A legacy Megatron `iter_N/` of one model-parallel rank: its file's model tensors whole.
    Several ranks are refused: how a layer is cut (by rows or by columns) is Megatron's code."""
    ranks = sorted(d for d in os.listdir(folder) if MP_RANK_FOLDER.match(d))
    if len(ranks) != 1:
        raise UsageError(
            f"not split: {folder} has {len(ranks)} model-parallel ranks (how each layer is cut "
            "across them is known to Megatron's code only)"
        )
    names = [f"{ranks[0]}/{n}" for n in LEGACY_FILES if (folder / ranks[0] / n).is_file()]
    if not names:
        raise CorruptCheckpoint(f"{folder}/{ranks[0]} holds no {LEGACY_FILES[0]}")
    with rank_files.opened(folder / names[0], root) as (_raw, archive):
        tensors = torch_state.model_tensors_of(rank_files.state_of(archive, names[0]))
    starts = _starts(folder / names[0], root, tensors)
    plan = []
    for name, record in tensors:
        out = Tensor(name, dtype_code(name, record.dtype), record.shape)
        chunk = Chunk(names[0], starts[name], record, (0,) * len(record.shape))
        plan.append(Planned(out, pickle_safe.ITEM_SIZES[record.dtype], _tiled(out, [chunk])))
    return plan


def _starts(
    path: Path, root: Path | None, wanted: list[tuple[str, TensorRecord]]
) -> dict[str, int]:
    with rank_files.opened(path, root) as (raw, archive):
        return storage_starts(raw, archive, wanted, path.name)


def _tiled(out: Tensor, chunks: list[Chunk]) -> tuple[Chunk, ...]:
    """The chunks, checked to tile `out` exactly (`core.tiling`), in order."""
    check_tiles(out.name, out.shape, [(c.offsets, c.record.shape) for c in chunks])
    return tuple(sorted(chunks, key=lambda c: c.offsets))
