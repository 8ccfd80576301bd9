"""A sharded tensor's bytes in row-major order from its pieces, a block of rows at a time.

Each piece (`Chunk`) is a view (`pickle_safe.TensorRecord`: shape, stride, offset) of a storage
at a byte offset of one file, placed at `offsets` in the global tensor. A block of leading rows
(about `BLOCK_BYTES`) is filled from the pieces that cover it: a piece dense in its storage is
one `pread` per block; any other is a strided copy through a read-only mapping made and closed
per block (pages of a mapping count in RSS while it lives). Memory stays one block whatever the
tensor's size; elements are moved as unsigned integers of their width (bf16, float8 untouched).
Where a piece's storage starts in a torch zip (`storage_starts`) is checked first: a member
stored raw, holding every element its view reaches (a hostile stride or offset would otherwise
read past it).
"""

from __future__ import annotations

import mmap
import os
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from ..core.errors import CorruptCheckpoint
from ..formats import torch_zip, window
from ..formats.pickle_safe import ITEM_SIZES, TensorRecord
from ..fs import beneath
from .safetensors_out import Tensor

BLOCK_BYTES = 4 << 20
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


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


class OpenFiles:
    """The data files of a save, opened beneath its root when first read, at most `LIMIT` at
    once (a save of 1,000 ranks has 1,000 files: more than a process's usual 1,024 fds once
    the daemon's own are counted); closed least recently used first, all at the end."""

    LIMIT = 64

    def __init__(self, folder: Path, root: Path | None) -> None:
        self.folder, self.root = folder, root
        self.open: OrderedDict[str, int] = OrderedDict()

    def fd(self, name: str) -> int:
        if name in self.open:
            self.open.move_to_end(name)
            return self.open[name]
        if len(self.open) >= self.LIMIT:
            os.close(self.open.popitem(last=False)[1])
        self.open[name] = beneath.open_regular(self.folder / name, self.root)
        return self.open[name]

    def __enter__(self) -> OpenFiles:
        return self

    def __exit__(self, *_: object) -> None:
        while self.open:
            os.close(self.open.popitem()[1])


def storage_starts(
    raw: IO[bytes], archive: zipfile.ZipFile, wanted: list[tuple[str, TensorRecord]], file: str
) -> dict[str, int]:
    """Where each tensor's storage starts in the torch zip `file` (open as `raw`, `archive`):
    its member stored raw and holding the tensor's view."""
    member = torch_zip.pickle_member(archive) or ""
    prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
    starts = {}
    for name, record in wanted:
        if record.storage is None:
            raise CorruptCheckpoint(f"{name}: no storage")
        try:
            info = archive.getinfo(f"{prefix}data/{record.storage.key}")
        except KeyError:
            raise CorruptCheckpoint(f"{name}: its storage is missing in {file}") from None
        if info.compress_type != zipfile.ZIP_STORED:
            raise CorruptCheckpoint(f"{name}: its storage is not stored raw")
        check_view(name, record, info.file_size)
        starts[name] = window.member_offset(raw, info)
    return starts


def check_view(name: str, record: TensorRecord, member_bytes: int) -> None:
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
    if (last + 1) * ITEM_SIZES[record.dtype] > member_bytes:
        raise CorruptCheckpoint(
            f"tensor {name}: its view (offset {record.offset}, stride {record.stride}) reaches "
            f"past its storage's {member_bytes} bytes"
        )


def tensor_bytes(p: Planned, fd_of: Callable[[str], int]) -> Iterator[bytes]:
    """The tensor's bytes in row-major order, one block of leading rows at a time."""
    shape, size = p.out.shape, p.itemsize
    if p.out.nbytes == 0:  # no element: nothing to read (its view may name no storage)
        return
    if not shape:  # a 0-d tensor: one element, one chunk
        c = p.chunks[0]
        yield _pread(fd_of(c.file), size, c.start + c.record.offset * size)
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
            _fill(target, c, lo - c.offsets[0], hi - c.offsets[0], fd_of(c.file), size)
        yield block.tobytes()


def _spans(c: Chunk) -> tuple[slice, ...]:
    return tuple(slice(o, o + s) for o, s in zip(c.offsets, c.record.shape, strict=True))


def _fill(target: np.ndarray, c: Chunk, lo: int, hi: int, fd: int, size: int) -> None:
    """`target` = rows lo..hi of chunk `c`: one pread when those rows are one byte range."""
    r = c.record
    dense = all(
        s == e for s, e, d in zip(r.stride, row_major(r.shape), r.shape, strict=True) if d != 1
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


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides (in elements) of a dense tensor of `shape`."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _pread(fd: int, count: int, at: int) -> bytes:
    parts, left = [], count
    while left:
        got = os.pread(fd, min(left, 1 << 24), at + count - left)
        if not got:
            raise CorruptCheckpoint("a data file ends before the bytes its metadata names")
        parts.append(got)
        left -= len(got)
    return b"".join(parts)
