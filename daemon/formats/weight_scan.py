"""Every floating tensor of a checkpoint's weights read for `core.health`'s tallies, a bounded
chunk at a time, without running a byte of the file: safetensors files (offsets from a header
our reader checked against the file), torch zips (`.pt`, `.pth`, `.bin`, a Lightning `.ckpt`:
the restricted unpickler's tensor records, their bytes read from the storage members, a view
through a strided numpy view of the mapped storage), Hugging Face folders (their safetensors
or `.bin` weights files, shards too) and Keras HDF5 weights (`.keras`, `.weights.h5`, a
legacy `.h5`: h5py datasets read a slab of rows at a time) and DCP folders (each tensor item's
byte range of its data file, a `torch.save` zip, as `.metadata` names it).

Memory stays bounded by `CHUNK` whatever a tensor's size (a view's slab is at least one row of
it). What this cannot read (a TF checkpoint, Orbax, a SavedModel) is `scannable(...)` False,
and a legacy or big-endian torch file or a DCP item stored transformed raises NotScanned: the
stage says `not scanned`, never healthy. A file that contradicts
itself (truncated, offsets or a view out of its storage) is refused with the reason."""

from __future__ import annotations

import dataclasses
import io
import math
import mmap
import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import h5py
import numpy as np

from ..core.errors import CorruptCheckpoint, NotScanned
from ..core.health import Tally
from ..core.model import Format
from ..fs import beneath
from . import (
    dcp_folder,
    hdf5,
    hf_weights,
    keras_v3,
    pickle_safe,
    safetensors_file,
    torch_zip,
    window,
)
from .pickle_safe import TensorRecord
from .tensor_values import Counts, canonical, count, is_float

CHUNK = 1 << 20  # bytes of a tensor counted at once
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass
class Scan:
    """What was read: each floating tensor's tally, and the files they came from."""

    tallies: list[Tally] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def scannable(fmt: Format | None) -> bool:
    return fmt in _SCANNERS


def scan(path: Path, fmt: Format) -> Scan:
    """The tallies of the checkpoint at `path` (a file, or an HF folder) of format `fmt`."""
    scanner = _SCANNERS.get(fmt)
    if scanner is None:
        raise ValueError(f"{fmt} is not scanned")  # callers ask `scannable` first
    found = Scan()
    scanner(path, found)
    return found


def _tally(name: str, dtype: str, chunks: Iterator[bytes | np.ndarray]) -> Tally:
    total = Counts()
    for chunk in chunks:
        total.add(count(chunk, dtype))
    t = total
    return Tally(name, canonical(dtype), t.elements, t.nan, t.inf, t.zero, t.huge)


def _ranges(fd: int, start: int, nbytes: int, what: str) -> Iterator[bytes]:
    """`nbytes` bytes at `start` of the open file, CHUNK (a multiple of every item size) at a
    time; the file ending early is refused."""
    at, end = start, start + nbytes
    while at < end:
        want = min(CHUNK, end - at)
        chunk = os.pread(fd, want, at)
        while 0 < len(chunk) < want:  # a short read: whole values only, so read on
            more = os.pread(fd, want - len(chunk), at + len(chunk))
            if not more:
                break
            chunk += more
        if len(chunk) < want:
            raise CorruptCheckpoint(f"{what}: the file ends early (truncated)")
        at += len(chunk)
        yield chunk


# -- safetensors --------------------------------------------------------------------------


def _safetensors(path: Path, found: Scan, prefix: str = "") -> None:
    with open(path, "rb") as raw:
        for name, dtype, _shape, start, nbytes in safetensors_file.layout(raw):
            if is_float(dtype):
                chunks = _ranges(raw.fileno(), start, nbytes, f"tensor {name}")
                found.tallies.append(_tally(prefix + name, dtype, chunks))
    found.files.append(path.name)


# -- torch zips ---------------------------------------------------------------------------


def _torch(path: Path, found: Scan, prefix: str = "") -> None:
    with open(path, "rb") as raw:
        if torch_zip.is_legacy(raw.read(len(torch_zip.LEGACY_MAGIC))):
            raise NotScanned(f"{path.name} is a legacy (pre-1.6) torch file")
        _torch_zip(raw, 0, os.fstat(raw.fileno()).st_size, found, prefix, path.name)
    found.files.append(path.name)


def _torch_zip(raw: IO[bytes], base: int, length: int, found: Scan, prefix: str, what: str) -> None:
    """The tensors of the torch zip at bytes [base, base + length) of the open file (a whole
    `.pt`, or one item of a DCP data file)."""
    region = io.BufferedReader(window.Window(raw, base, length), buffer_size=1 << 16)
    window.check_directory(region)
    try:
        archive = zipfile.ZipFile(region)
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpoint(f"{what} is not a torch zip ({exc})") from exc
    with archive:
        member = torch_zip.pickle_member(archive)
        if member is None:
            raise CorruptCheckpoint(f"{what} is a zip but not a torch file")
        top = member[: -len(torch_zip.PICKLE_MEMBER)]
        if _byteorder(archive, top) != "little":
            raise NotScanned(f"{what} was saved big-endian")
        obj = pickle_safe.load(window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES))
        walked = pickle_safe.walk(obj)
        if walked.too_many or walked.too_deep:
            raise CorruptCheckpoint(f"{what}: its object is too big or deep to walk")
        members = {i.filename: i for i in archive.infolist()}
        for name, record in walked.tensors:
            if not is_float(record.dtype):
                continue
            info = _storage(name, record, members, top)
            start = window.member_offset(region, info)
            if start + info.file_size > length:
                raise CorruptCheckpoint(f"tensor {name}: its storage runs past the file's end")
            chunks = _view_bytes(raw, base + start, info.file_size, name, record)
            found.tallies.append(_tally(prefix + name, record.dtype, chunks))


def _byteorder(archive: zipfile.ZipFile, base: str) -> str:
    try:
        return window.read_member(archive, f"{base}byteorder", 64).decode(errors="replace").strip()
    except KeyError:
        return "little"  # torch < 1.13 wrote no byteorder member: always little-endian


def _storage(
    name: str, record: TensorRecord, members: dict[str, zipfile.ZipInfo], base: str
) -> zipfile.ZipInfo:
    """The tensor's storage member, checked to hold every element its view reaches."""
    if record.storage is None:
        raise CorruptCheckpoint(f"tensor {name}: no storage")
    info = members.get(f"{base}data/{record.storage.key}")
    if info is None or info.compress_type != zipfile.ZIP_STORED:
        raise CorruptCheckpoint(f"tensor {name}: its storage is missing or not stored raw")
    if len(record.stride) != len(record.shape) or record.offset < 0:
        raise CorruptCheckpoint(f"tensor {name}: stride {record.stride} for shape {record.shape}")
    if record.numel == 0:
        return info
    itemsize = pickle_safe.ITEM_SIZES[record.dtype]
    reach = zip(record.shape, record.stride, strict=True)
    last = record.offset + sum((d - 1) * s for d, s in reach)
    if any(s < 0 for s in record.stride) or (last + 1) * itemsize > info.file_size:
        raise CorruptCheckpoint(
            f"tensor {name}: its view (offset {record.offset}, stride {record.stride}) reaches "
            f"past its storage's {info.file_size} bytes"
        )
    return info


def _dense(record: TensorRecord) -> bool:
    """Whether the view reaches each element of `numel` consecutive ones of its storage once
    (contiguous, or a transpose or permutation of such): its tally is that range's, whatever
    the order (counts do not depend on it)."""
    expected = 1
    for d, s in sorted(zip(record.shape, record.stride, strict=True), key=lambda ds: ds[1]):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def _view_bytes(
    raw: IO[bytes], start: int, storage_bytes: int, name: str, record: TensorRecord
) -> Iterator[bytes | np.ndarray]:
    """The view's elements: a byte range when dense (contiguous, transposed), else slabs of a
    strided view of the mapped storage (each at least one row, else about CHUNK bytes), the
    mapping's pages dropped after each (file pages, read again if needed: the resident set
    stays a slab's, not the storage's)."""
    if record.numel == 0:
        return
    itemsize = pickle_safe.ITEM_SIZES[record.dtype]
    if _dense(record):
        yield from _ranges(raw.fileno(), start + record.offset * itemsize, record.nbytes, name)
        return
    mapped = mmap.mmap(raw.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        storage = np.frombuffer(
            mapped, dtype=_UNSIGNED[itemsize], count=storage_bytes // itemsize, offset=start
        )
        # The largest stride first (the tally does not depend on the order): a slab of `rows`
        # along it then spans about CHUNK bytes of the storage, the pages it touches.
        dims = sorted(zip(record.shape, record.stride, strict=True), key=lambda ds: -ds[1])
        view = np.lib.stride_tricks.as_strided(
            storage[record.offset :],
            shape=tuple(d for d, _ in dims),
            strides=tuple(s * itemsize for _, s in dims),
            writeable=False,
        )
        inner = 1 + sum((d - 1) * s for d, s in dims[1:])
        room = CHUNK // itemsize - inner
        rows = max(1, room // max(1, dims[0][1]) + 1) if room > 0 else 1
        for first in range(0, dims[0][0], rows):
            yield np.ascontiguousarray(view[first : first + rows])
            mapped.madvise(mmap.MADV_DONTNEED)
        del storage, view
    finally:
        mapped.close()


# -- Hugging Face folders -----------------------------------------------------------------


def _hf_folder(folder: Path, found: Scan) -> None:
    names = frozenset(e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
    weights = hf_weights.read_weights(folder, names, None)  # the files, checked and complete
    several = len(weights.files) > 1
    for name in weights.files:
        prefix = f"{name}:" if several else ""
        if name.endswith(".safetensors"):
            _safetensors(folder / name, found, prefix)
        else:
            _torch(folder / name, found, prefix)


# -- torch.distributed.checkpoint folders --------------------------------------------------


def _dcp(folder: Path, found: Scan) -> None:
    """Each tensor item of a DCP folder: `.metadata`'s `storage_data` names its data file and
    byte range, which `dcp.save` fills with a `torch.save` zip of that chunk."""
    dcp = dcp_folder.read_folder(folder)  # the folder complete: every range within its file
    if dcp.problems:
        raise CorruptCheckpoint(dcp.problems[0])
    floats = {t.key for t in dcp.tensors if is_float(t.dtype)}
    items: dict[str, list[tuple[str, int, int, int]]] = {}
    for index, info in dcp.storage.items():
        key = _fields(index).get("fqn")
        where = _fields(info)
        if key not in floats:
            continue
        if where.get("transform_descriptors"):
            raise NotScanned(
                f"DCP item {key} is stored transformed ({where['transform_descriptors']})"
            )
        chunk = _fields(index).get("index")
        name, offset, length = where.get("relative_path"), where.get("offset"), where.get("length")
        if not (isinstance(name, str) and isinstance(offset, int) and isinstance(length, int)):
            raise CorruptCheckpoint(f"DCP item {key}: no byte range in .metadata")
        if offset < 0 or length < 0:
            raise CorruptCheckpoint(f"DCP item {key}: byte range {offset}+{length} refused")
        number = chunk if isinstance(chunk, int) else 0
        items.setdefault(name, []).append((str(key), number, offset, length))
    for name in sorted(items):
        # read_folder checked its name (in the folder) and size (every range inside it)
        with os.fdopen(beneath.open_regular(folder / name, None), "rb") as raw:
            for key, chunk, offset, length in sorted(items[name], key=lambda i: i[2]):
                label = key if chunk == 0 else f"{key}#{chunk}"
                part = Scan()
                _torch_zip(raw, offset, length, part, "", f"{name}:{key}")
                for t in part.tallies:  # the chunk's one tensor, named by its key
                    found.tallies.append(dataclasses.replace(t, name=label))
        found.files.append(name)


def _fields(value: object) -> dict[str, object]:
    state = value.state if isinstance(value, pickle_safe.Opaque) else None
    return state if isinstance(state, dict) else {}


# -- Keras HDF5 ---------------------------------------------------------------------------


def _keras_zip(path: Path, found: Scan) -> None:
    with open(path, "rb") as raw:
        window.check_directory(raw)
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise CorruptCheckpoint(f"{path.name} is not a zip ({exc})") from exc
        with (
            archive,
            window.open_member(archive, raw, keras_v3.WEIGHTS_MEMBER) as member,
            hdf5.open_h5(member) as f,
        ):
            _h5_datasets(f, found)
    found.files.append(path.name)


def _keras_h5(path: Path, found: Scan) -> None:
    with open(path, "rb") as raw, hdf5.open_h5(raw) as f:
        _h5_datasets(f, found)
    found.files.append(path.name)


def _h5_datasets(f: h5py.File, found: Scan) -> None:
    for name, dataset in hdf5.datasets(f):
        dtype = dataset.dtype
        if dtype.kind != "f" or not is_float(dtype.name):
            continue
        found.tallies.append(_tally(name, dtype.name, _slabs(dataset)))


def _slabs(dataset: h5py.Dataset) -> Iterator[np.ndarray]:
    shape = tuple(dataset.shape)
    little = dataset.dtype.newbyteorder("<")
    if not shape:
        yield np.ascontiguousarray(dataset[()], dtype=little)
        return
    row_bytes = dataset.dtype.itemsize * math.prod(shape[1:])
    rows = max(1, CHUNK // max(1, row_bytes))
    for first in range(0, shape[0], rows):
        yield np.ascontiguousarray(dataset[first : first + rows], dtype=little)


# Each scanned format's scanner; a format not here is not scanned (`scannable`).
_SCANNERS: dict[Format, Callable[[Path, Scan], None]] = {
    Format.SAFETENSORS: _safetensors,
    Format.TORCH_ZIP: _torch,
    Format.LIGHTNING: _torch,
    Format.HF_FOLDER: _hf_folder,
    Format.TORCH_DCP: _dcp,
    Format.KERAS_ZIP: _keras_zip,
    Format.KERAS_WEIGHTS_H5: _keras_h5,
    Format.KERAS_LEGACY_H5: _keras_h5,
    Format.KERAS_LEGACY_WEIGHTS_H5: _keras_h5,
}
