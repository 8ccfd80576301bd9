"""Consolidate a sharded save into one safetensors of the full model (or shards with an index),
without torch: a DCP folder, a Megatron torch_dist `iter_N/` (DCP too), a folder of FSDP2 /
verl per-rank torch files. Only the model's tensors go in (never optimizer state), each in the
dtype it was saved in.

Where each piece is, from metadata alone: DCP's `.metadata` gives each tensor's global shape,
its chunks (offsets, sizes) and, per chunk, the byte range of its item in a `__R_N.distcp` file
(`storage_data`). With the default serialization each item is a small `torch.save` zip of its
own (its storage member is read where it lies, through the item's pickle record: shape,
stride, offset); an item of raw bytes (DCP's other serialization) is the chunk contiguous.
Items with `transform_descriptors` (compressed, encrypted) are refused. A per-rank file's
DTensor records give each rank's piece (`formats.rank_files`).

The output is written in order (`transforms.safetensors_out`): each tensor a block of leading
rows at a time (about `BLOCK_BYTES`), each block filled from the chunks that cover it by
byte copies (a chunk whole along the other dimensions is one `pread` per block; any other is a
strided copy through a mapping made and dropped per block), so memory stays one block whatever
the model's size. Chunks must tile the tensor exactly (no gap, no overlap), else refused.
"""

from __future__ import annotations

import mmap
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np

from ..core.errors import CorruptCheckpoint, UsageError
from ..core.model import Format
from ..core.tiling import check_tiles
from ..formats import dcp_folder, pickle_safe, rank_files, safetensors_file, torch_zip, window
from ..formats.pickle_safe import Opaque, StorageRef, TensorRecord
from ..fs import beneath, fsops
from . import marker, safetensors_out
from .safetensors_out import Tensor
from .split import SplitResult, check_unchanged

SUFFIX = ".consolidated.safetensors"
BLOCK_BYTES = 4 << 20
SHARD_BYTES = 5 * 10**9  # the Hugging Face default `max_shard_size` ("5GB")
CONSOLIDATED = (Format.TORCH_DCP, Format.MEGATRON_DIST, Format.TORCH_RANKS)
_SAFETENSORS_DTYPES = {v: k for k, v in safetensors_file.TORCH_DTYPES.items()}
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_OPTIMIZER = re.compile(r"^(optim|optimizer|optim_state|optimizer_state)\.")


@dataclass(frozen=True)
class Chunk:
    """One piece of a tensor: its place in the global tensor and its elements in a file."""

    file: str  # relative to the checkpoint folder
    start: int  # where the piece's storage begins in the file (bytes)
    record: TensorRecord  # the piece's view of that storage (elements)
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class Planned:
    out: Tensor
    itemsize: int
    chunks: tuple[Chunk, ...]


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`step-3/` -> `step-3.consolidated.safetensors` beside it (or in `out_dir`)."""
    return (out_dir if out_dir is not None else source.parent) / f"{source.name}{SUFFIX}"


def split(
    root: Path,
    source: Path,
    fmt: Format,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    source_hash: str | None = None,
    shard_bytes: int | None = SHARD_BYTES,
) -> SplitResult:
    """Write the consolidated model of the sharded checkpoint folder `source` (below `root`)."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])
    plan = plan_ranks(source, root) if fmt == Format.TORCH_RANKS else plan_dcp(source, root)
    if not plan:
        raise UsageError(f"not split: {source} holds no model tensors")
    by_name = {p.out.name: p for p in plan}
    handles: dict[str, int] = {}
    try:
        for name in sorted({c.file for p in plan for c in p.chunks}):
            handles[name] = beneath.open_regular(source / name, root)

        def chunks(t: Tensor) -> Iterator[bytes]:
            return tensor_bytes(by_name[t.name], handles)

        try:
            written = safetensors_out.write(
                root,
                final,
                [p.out for p in plan],
                chunks,
                like=source / plan[0].chunks[0].file,  # its mode and times
                metadata={marker.ATTRIBUTE: marker.encode("inference", source, source_hash)},
                shard_bytes=shard_bytes,
                replacing=replacing,
                before_rename=lambda: check_unchanged(root, source, before),
            )
        except Exception as exc:
            check_unchanged(root, source, before, exc)
            raise
    finally:
        for fd in handles.values():
            os.close(fd)
    return SplitResult(source, written.path, written.bytes, written.hash, before.size, len(plan))


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
        out = Tensor(name, _dtype_code(name, t.dtype), t.shape)
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
        offsets = key.get("offset")
        items[(str(key.get("fqn")), tuple(offsets) if offsets is not None else ())] = (
            name,
            offset,
            length,
        )
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
        raw.seek(at)
        if raw.read(4) != b"PK\x03\x04":  # DCP's raw serialization: the chunk's bytes
            numel = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
            if length != numel * pickle_safe.ITEM_SIZES[dtype]:
                raise CorruptCheckpoint(f"{key}: an item of {length} bytes for {sizes} {dtype}")
            return Chunk(name, at, _contiguous(dtype, sizes), offsets)
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
            prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
            info = archive.getinfo(f"{prefix}data/{record.storage.key}")
            if info.compress_type != zipfile.ZIP_STORED:
                raise CorruptCheckpoint(f"{key}: its storage is not stored raw")
            _check_view(key, record, info.file_size)
            start = at + window.member_offset(item, info)
    return Chunk(name, start, record, offsets)


def plan_ranks(folder: Path, root: Path | None) -> list[Planned]:
    """The model of a folder of per-rank files, each rank's DTensor piece where it lies."""
    ranks = rank_files.rank_set(folder)
    plan = []
    for t in rank_files.model_tensors(ranks, root):
        out = Tensor(t.name, _dtype_code(t.name, t.dtype), t.shape)
        pieces = []
        for piece in t.pieces:
            with rank_files.opened(folder / piece.file, root) as (raw, archive):
                member = torch_zip.pickle_member(archive) or ""
                prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
                assert piece.record.storage is not None
                try:
                    info = archive.getinfo(f"{prefix}data/{piece.record.storage.key}")
                except KeyError:
                    raise CorruptCheckpoint(
                        f"{t.name}: rank {piece.rank}'s storage is missing"
                    ) from None
                if info.compress_type != zipfile.ZIP_STORED:
                    raise CorruptCheckpoint(f"{t.name}: its storage is not stored raw")
                _check_view(t.name, piece.record, info.file_size)
                start = window.member_offset(raw, info)
            pieces.append(Chunk(piece.file, start, piece.record, piece.offsets))
        plan.append(Planned(out, pickle_safe.ITEM_SIZES[t.dtype], _tiled(out, pieces)))
    return plan


def _dtype_code(name: str, dtype: str) -> str:
    code = _SAFETENSORS_DTYPES.get(dtype)
    if code is None:
        raise UsageError(f"not split: tensor {name} is {dtype}, which safetensors cannot hold")
    return code


def _contiguous(dtype: str, shape: tuple[int, ...]) -> TensorRecord:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return TensorRecord(
        dtype, shape, tuple(reversed(stride)), 0, StorageRef("raw", dtype, acc, "cpu")
    )


def _check_view(name: str, record: TensorRecord, member_bytes: int) -> None:
    """Every element the view reaches lies inside its storage member."""
    if record.numel == 0:
        return
    if (
        len(record.stride) != len(record.shape)
        or record.offset < 0
        or min(record.stride, default=0) < 0
    ):
        raise CorruptCheckpoint(f"tensor {name}: stride {record.stride} for shape {record.shape}")
    last = record.offset + sum(
        (d - 1) * s for d, s in zip(record.shape, record.stride, strict=True)
    )
    if (last + 1) * pickle_safe.ITEM_SIZES[record.dtype] > member_bytes:
        raise CorruptCheckpoint(f"tensor {name}: its view reaches past its storage")


def _tiled(out: Tensor, chunks: list[Chunk]) -> tuple[Chunk, ...]:
    """The chunks, checked to tile `out` exactly (`core.tiling`), in order."""
    check_tiles(out.name, out.shape, [(c.offsets, c.record.shape) for c in chunks])
    return tuple(sorted(chunks, key=lambda c: c.offsets))


# ---- the bytes, in order ----


def tensor_bytes(p: Planned, handles: dict[str, int]) -> Iterator[bytes]:
    """The tensor's bytes in row-major order, one block of leading rows at a time."""
    shape, size = p.out.shape, p.itemsize
    if not shape:  # a 0-d tensor: one element, one chunk
        c = p.chunks[0]
        yield _pread(handles[c.file], size, c.start + c.record.offset * size)
        return
    row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    rows = max(1, BLOCK_BYTES // max(1, row * size))
    for first in range(0, shape[0], rows):
        last = min(shape[0], first + rows)
        block = np.empty((last - first, *shape[1:]), dtype=_UNSIGNED[size])
        for c in p.chunks:
            lo, hi = max(first, c.offsets[0]), min(last, c.offsets[0] + c.record.shape[0])
            if lo >= hi:
                continue
            target = block[(slice(lo - first, hi - first), *_spans(c)[1:])]
            _fill(target, c, lo - c.offsets[0], hi - c.offsets[0], handles[c.file], size)
        yield block.tobytes()


def _spans(c: Chunk) -> tuple[slice, ...]:
    return tuple(slice(o, o + s) for o, s in zip(c.offsets, c.record.shape, strict=True))


def _fill(target: np.ndarray, c: Chunk, lo: int, hi: int, fd: int, size: int) -> None:
    """`target` = rows lo..hi of chunk `c`: one pread when those rows are one byte range."""
    r = c.record
    dense = all(
        s == int(np.prod(r.shape[i + 1 :], dtype=np.int64))
        for i, s in enumerate(r.stride)
        if r.shape[i] != 1
    )
    if dense:
        begin = c.start + (r.offset + lo * r.stride[0]) * size
        data = _pread(fd, target.size * size, begin)
        target[...] = np.frombuffer(data, dtype=target.dtype).reshape(target.shape)
        return
    count = r.offset + sum((d - 1) * s for d, s in zip(r.shape, r.stride, strict=True)) + 1
    aligned = c.start - c.start % mmap.ALLOCATIONGRANULARITY
    mapping = mmap.mmap(
        fd, c.start - aligned + count * size, offset=aligned, access=mmap.ACCESS_READ
    )
    try:
        storage = np.frombuffer(mapping, target.dtype, count, offset=c.start - aligned)
        view = np.lib.stride_tricks.as_strided(
            storage[r.offset :],
            shape=r.shape,
            strides=tuple(s * size for s in r.stride),
            writeable=False,
        )
        target[...] = view[lo:hi]
        del view, storage  # the mapping closes only once nothing points into it
    finally:
        mapping.close()


def _pread(fd: int, count: int, at: int) -> bytes:
    parts, left = [], count
    while left:
        got = os.pread(fd, min(left, 1 << 24), at + count - left)
        if not got:
            raise CorruptCheckpoint("a data file ends before the bytes its metadata names")
        parts.append(got)
        left -= len(got)
    return b"".join(parts)
