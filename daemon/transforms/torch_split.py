"""Split a `torch.save` zip (a `.pt`/`.pth` training checkpoint, a Lightning `.ckpt`) into an
inference `.safetensors` of its model's state dict; the original stays the resume artifact.

Written without torch: the restricted unpickler (`formats.pickle_safe`) gives each model tensor
as a record (dtype, shape, stride, storage offset, storage key), and the tensor's bytes are
copied from its storage member `<prefix>/data/<key>` (STORED, a byte range of the file) into a
safetensors file whose header we write ourselves (8-byte length, JSON, space padding to 8).
A view (a slice at an offset, a transpose, a tensor sharing its storage with others) is copied
element by element in the tensor's own order through a strided numpy view of the mapped
storage (an unsigned integer of the dtype's width: bfloat16 and float8 bytes move untouched),
so each saved tensor holds exactly what `torch.load` would give. Refused with the reason: a
legacy (pre-1.6) file, a big-endian file, a dtype safetensors has no name for (quantized,
complex32), a storage that does not hold the view, two tensors under one name.

The file itself is written and verified by `transforms.safetensors_out` (header, streamed
bytes, read back and hashed against the copy before the rename); the source is checked
unchanged right before the rename.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from ..core.errors import CorruptCheckpoint, UsageError
from ..core.model import Format
from ..formats import pickle_safe, safetensors_file, torch_state, torch_zip, window
from ..formats.pickle_safe import TensorRecord
from ..fs import fsops
from . import marker, safetensors_out
from .safetensors_out import Tensor
from .split import SplitResult, check_unchanged

SUFFIX = safetensors_out.SUFFIX
METADATA_FORMAT = safetensors_out.METADATA_FORMAT
_CHUNK = 1 << 20
_SAFETENSORS_DTYPES = {v: k for k, v in safetensors_file.TORCH_DTYPES.items()}
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class _Planned:
    """One tensor of the artifact and where its bytes come from."""

    out: Tensor
    record: TensorRecord
    member: str  # the storage member in the source zip


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`full.pt` -> `full.inference.safetensors`, `last.ckpt` -> `last.inference.safetensors`;
    a kept version `best.pt.v3` -> `best.pt.v3.inference.safetensors` (its generation stays in
    the name: every version of `best.pt` would otherwise claim one artifact's name)."""
    generation = source.suffix[2:].isdigit() and source.suffix.startswith(".v")
    stem = source.stem if source.suffix and not generation else source.name
    return (out_dir if out_dir is not None else source.parent) / f"{stem}.inference{SUFFIX}"


def split(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    keep_compile: bool = False,  # every splitter's signature: a torch file compiles nothing
    source_hash: str | None = None,
) -> SplitResult:
    """Write the inference `.safetensors` of the torch zip `source` (below `root`) beside it or
    into `out`; never replaces anything but `replacing` (this checkpoint's own artifact).
    UsageError for what is not split (see the module doc), CorruptCheckpoint for a storage
    that does not hold its tensors, ArtifactMismatch if the written file does not verify."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])  # also refuses a source outside `root`
    mark = marker.encode("inference", source, source_hash)
    with open(source, "rb") as raw:
        if torch_zip.is_legacy(raw.read(len(torch_zip.LEGACY_MAGIC))):
            raise UsageError(
                f"not split: {source} is a legacy (pre-1.6) torch file: re-save it with a "
                "current torch (its storages are not a zip's members to copy)"
            )
        raw.seek(0)
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise UsageError(f"not split: {source} is not a torch zip ({exc})") from exc
        with archive:
            plan = _plan(archive, source)
            by_name = {p.out.name: p for p in plan}

            def chunks(t: Tensor) -> Iterator[bytes]:
                return _tensor_bytes(archive, raw, by_name[t.name])

            try:
                written = safetensors_out.write(
                    root,
                    final,
                    [p.out for p in plan],
                    chunks,
                    like=source,
                    metadata={marker.ATTRIBUTE: mark},
                    replacing=replacing,
                    # the last look, right before the rename
                    before_rename=lambda: check_unchanged(root, source, before),
                )
            except Exception as exc:
                check_unchanged(root, source, before, exc)
                raise
    return SplitResult(source, final, written.bytes, written.hash, before.size, len(plan))


def _plan(archive: zipfile.ZipFile, source: Path) -> list[_Planned]:
    member = torch_zip.pickle_member(archive)
    if member is None:
        raise UsageError(f"not split: {source} is a zip but not a torch file")
    prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
    if _byteorder(archive, prefix) != "little":
        raise UsageError(f"not split: {source} was saved big-endian (safetensors is little)")
    obj = pickle_safe.load(window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES))
    torch_state.interpret(obj, Format.TORCH_ZIP)  # the reader's bounds and refusals
    if not torch_state.optimizer_state_of(obj):
        raise UsageError(f"nothing to split: {source} has no optimizer state")
    tensors = torch_state.model_tensors_of(obj)
    if not tensors:
        raise UsageError(f"not split: {source} holds no model tensors")
    members = {i.filename: i for i in archive.infolist()}
    plan: list[_Planned] = []
    seen: set[str] = set()
    for name, record in tensors:
        _check_tensor(source, name, record, seen)
        assert record.storage is not None
        info = members.get(f"{prefix}data/{record.storage.key}")
        if info is None or info.compress_type != zipfile.ZIP_STORED:
            raise CorruptCheckpoint(f"tensor {name}: its storage is missing or not stored raw")
        _check_in_storage(name, record, info.file_size)
        out = Tensor(name, _SAFETENSORS_DTYPES[record.dtype], tuple(record.shape))
        plan.append(_Planned(out, record, info.filename))
    return plan


def _byteorder(archive: zipfile.ZipFile, prefix: str) -> str:
    try:
        return archive.read(f"{prefix}byteorder").decode(errors="replace").strip()
    except KeyError:
        return "little"  # torch < 1.13 wrote no byteorder member: always little-endian


def _check_tensor(source: Path, name: str, record: TensorRecord, seen: set[str]) -> None:
    if name in seen or name == "__metadata__":
        raise UsageError(f"not split: {source} names two tensors {name!r}")
    seen.add(name)
    if record.dtype not in _SAFETENSORS_DTYPES:
        raise UsageError(
            f"not split: tensor {name} of {source} is {record.dtype}, which safetensors cannot hold"
        )
    if record.storage is None:
        raise CorruptCheckpoint(f"tensor {name}: no storage")
    if len(record.stride) != len(record.shape) or record.offset < 0:
        raise CorruptCheckpoint(f"tensor {name}: stride {record.stride} for shape {record.shape}")


def _check_in_storage(name: str, record: TensorRecord, member_bytes: int) -> None:
    """Every element the view reaches lies inside its storage (a hostile stride or offset
    would otherwise read past it)."""
    if record.numel == 0:
        return
    last = record.offset + sum(
        (d - 1) * s for d, s in zip(record.shape, record.stride, strict=True)
    )
    itemsize = pickle_safe.ITEM_SIZES[record.dtype]
    if any(s < 0 for s in record.stride) or (last + 1) * itemsize > member_bytes:
        raise CorruptCheckpoint(
            f"tensor {name}: its view (offset {record.offset}, stride {record.stride}) reaches "
            f"past its storage's {member_bytes} bytes"
        )


def _contiguous(record: TensorRecord) -> bool:
    expected = 1
    for d, s in zip(reversed(record.shape), reversed(record.stride), strict=True):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def _tensor_bytes(archive: zipfile.ZipFile, raw: IO[bytes], p: _Planned) -> Iterator[bytes]:
    """The tensor's bytes in row-major order, a bounded piece at a time."""
    record = p.record
    if record.numel == 0:
        return
    info = archive.getinfo(p.member)
    start = window.member_offset(raw, info)
    itemsize = pickle_safe.ITEM_SIZES[record.dtype]
    if _contiguous(record):
        at, end = start + record.offset * itemsize, start + record.offset * itemsize + record.nbytes
        while at < end:
            chunk = os.pread(raw.fileno(), min(_CHUNK, end - at), at)
            if not chunk:
                raise CorruptCheckpoint(f"tensor {p.out.name}: its storage ends early")
            at += len(chunk)
            yield chunk
        return
    elements = info.file_size // itemsize
    storage = np.memmap(raw, dtype=_UNSIGNED[itemsize], mode="r", offset=start, shape=(elements,))
    view = np.lib.stride_tricks.as_strided(
        storage[record.offset :],
        shape=record.shape,
        strides=tuple(s * itemsize for s in record.stride),
        writeable=False,
    )
    rows = max(1, _CHUNK // max(1, record.nbytes // max(1, record.shape[0])))
    for first in range(0, record.shape[0], rows):
        yield np.ascontiguousarray(view[first : first + rows]).tobytes()
