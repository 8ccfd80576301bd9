"""`torch.save` files: the zip format (torch >= 1.6) and the legacy pickle stream, metadata only.

A zip: the one member ending in `/data.pkl` holds the structure; each storage is a STORED
member `<prefix>/data/<key>`. The prefix is the file's stem at save time (`archive/` from a
BytesIO, as Lightning saves), so it is found, never assumed. The central directory is written
last: a file still being saved is not a zip yet, and the caller judges that by the file's age.
Storage members are never read, except the few bytes of a 0-d scalar (Adam's `step`,
Lightning's scores); each storage the pickle names must be a member of at least its size.

A legacy file (`_use_new_zipfile_serialization=False`) is a magic-number pickle, a protocol
pickle, a sys-info pickle, the object pickle, the sorted storage keys, then each storage as an
int64 element count and its bytes: every size is checked against the file's, nothing read.
"""

from __future__ import annotations

import os
import struct
import zipfile
from typing import IO

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format
from . import pickle_ops, pickle_safe, torch_state, window
from .pickle_safe import TensorRecord

PICKLE_MEMBER = "data.pkl"
# `pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)` without its STOP: how a legacy file starts.
LEGACY_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa85019")
MAX_SCALAR_READS = 256
_SCALAR_FORMATS = {"float32": "<f", "float64": "<d", "float16": "<e", "int64": "<q"}
_SCALAR_FORMATS |= {"int32": "<i", "int16": "<h", "int8": "<b", "uint8": "<B", "bool": "<?"}


def is_torch_zip(archive: zipfile.ZipFile) -> bool:
    return pickle_member(archive) is not None


def pickle_member(archive: zipfile.ZipFile) -> str | None:
    """The `<prefix>/data.pkl` member of a torch zip, or None (a Keras archive, any zip)."""
    found = [n for n in archive.namelist() if n.endswith("/" + PICKLE_MEMBER) and n.count("/") == 1]
    return found[0] if len(found) == 1 else None


def read_zip(archive: zipfile.ZipFile, raw: IO[bytes]) -> CheckpointInfo:
    member = pickle_member(archive)
    if member is None:
        raise CorruptCheckpoint("a zip archive that is neither a Keras nor a torch archive")
    prefix = member[: -len(PICKLE_MEMBER)]
    data = window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES)
    obj, ops = pickle_safe.read(data)
    walked = pickle_safe.walk(obj)
    _refuse_one_call(obj, ops, walked)
    _check_storages(archive, prefix, walked.tensors)
    reader = _ZipScalars(archive, raw, prefix)
    named = pickle_safe.placeholders(ops)
    return torch_state.interpret(obj, Format.TORCH_ZIP, reader.read, named)


def _refuse_one_call(obj: object, ops: pickle_safe.Ops, walked: pickle_safe.Walked) -> None:
    """A pickle whose whole value is one call (`posix.system(...)`), given no state and
    holding no tensor, is no checkpoint: corrupt, with the call named (never made)."""
    if (
        ops.top_call
        and isinstance(obj, pickle_safe.Opaque)
        and obj.state is None
        and not obj.items
        and not walked.tensors
    ):
        raise CorruptCheckpoint(
            f"its pickle is one call of {ops.top_call} holding no tensor: not a checkpoint "
            "(the call is never made)"
        )


def _check_storages(
    archive: zipfile.ZipFile, prefix: str, tensors: list[tuple[str, TensorRecord]]
) -> None:
    """Every storage a tensor names is a member of at least the storage's size, and stored
    (torch never compresses them: a deflated storage is not torch's, maybe a zip bomb)."""
    members = {i.filename: i for i in archive.infolist()}
    checked: set[str] = set()
    for name, tensor in tensors:
        ref = tensor.storage
        if ref is None or ref.key in checked:
            continue
        checked.add(ref.key)
        info = members.get(f"{prefix}data/{ref.key}")
        if info is None:
            raise CorruptCheckpoint(f"tensor {name}: its storage data/{ref.key} is missing")
        if info.compress_type != zipfile.ZIP_STORED:
            raise CorruptCheckpoint(
                f"storage data/{ref.key} is compressed ({info.compress_size} bytes claiming "
                f"{info.file_size}): torch stores them uncompressed; refused unread"
            )
        if info.file_size < ref.nbytes:
            raise CorruptCheckpoint(
                f"tensor {name}: storage data/{ref.key} holds {info.file_size} bytes, "
                f"its {ref.numel} {ref.dtype} elements need {ref.nbytes}"
            )


class _ZipScalars:
    """Reads the value of a one-element tensor from its stored member: a few bytes, bounded."""

    def __init__(self, archive: zipfile.ZipFile, raw: IO[bytes], prefix: str) -> None:
        self._archive, self._raw, self._prefix, self._reads = archive, raw, prefix, 0

    def read(self, tensor: TensorRecord) -> float | None:
        ref, fmt = tensor.storage, _SCALAR_FORMATS.get(tensor.dtype)
        if ref is None or fmt is None or tensor.numel != 1 or self._reads >= MAX_SCALAR_READS:
            return None
        self._reads += 1
        size = struct.calcsize(fmt)
        try:
            info = self._archive.getinfo(f"{self._prefix}data/{ref.key}")
            at = tensor.offset * size
            if info.compress_type != zipfile.ZIP_STORED or at + size > info.file_size:
                return None
            start = window.member_offset(self._raw, info)
            self._raw.seek(start + at)
            chunk = self._raw.read(size)
        except (KeyError, OSError, CorruptCheckpoint):
            return None
        if len(chunk) != size:
            return None
        return float(struct.unpack(fmt, chunk)[0])


def is_legacy(head: bytes) -> bool:
    return head.startswith(LEGACY_MAGIC)


def read_legacy(raw: IO[bytes]) -> CheckpointInfo:
    size = os.fstat(raw.fileno()).st_size
    for limit in (1 << 20, pickle_safe.MAX_PICKLE_BYTES):  # most files: the first MiB
        raw.seek(0)
        head = raw.read(min(size, limit))
        try:
            pickles = pickle_ops.split_stream(head, 5)
        except CorruptCheckpoint:
            if len(head) == size or limit == pickle_safe.MAX_PICKLE_BYTES:
                raise
            continue
        if len(pickles) == 5 or len(head) == size:
            break
    if len(pickles) < 5:
        raise CorruptCheckpoint(
            f"legacy torch file with {len(pickles)} of its 5 pickles "
            f"in the first {len(head)} bytes (truncated, or more structure than we read)"
        )
    if pickle_safe.load(pickles[1]) != 1001:
        raise CorruptCheckpoint("legacy torch file of an unknown protocol version")
    obj, ops = pickle_safe.read(pickles[3])
    keys = pickle_safe.load(pickles[4])
    if not isinstance(keys, list):
        raise CorruptCheckpoint("legacy torch file without its list of storages")
    walked = pickle_safe.walk(obj)
    _refuse_one_call(obj, ops, walked)
    tensors = walked.tensors
    refs = {t.storage.key: t.storage for _, t in tensors if t.storage is not None}
    at = sum(len(p) for p in pickles)
    for key in keys:
        ref = refs.get(str(key))
        if ref is None:
            raise CorruptCheckpoint(f"legacy torch file: storage {key} is used by no tensor")
        at += 8 + ref.nbytes
    if at != size:
        raise CorruptCheckpoint(
            f"legacy torch file of {size} bytes, its storages need {at} (truncated or extended)"
        )
    return torch_state.interpret(obj, Format.TORCH_LEGACY, named=pickle_safe.placeholders(ops))


SERIALIZATION_ID = ".data/serialization_id"  # random per save: no part of the content


def content_identity(raw: IO[bytes]) -> str | None:
    """What a `torch.save` zip holds, whatever file it was saved to: a digest of its members'
    names below the record prefix (the file's stem at save time), CRC-32s and sizes, read from
    the central directory alone (nothing decompressed, nothing unpickled), without
    `.data/serialization_id`. Two saves of the same dict to `last.pt` and `ckpt_epoch007.pt`
    differ in bytes and agree here. None when it cannot say: not a torch zip, or saved without
    CRC-32s (`torch.serialization.set_crc32_options(False)`: sizes alone prove nothing)."""
    import hashlib

    try:
        with zipfile.ZipFile(raw) as archive:
            member = pickle_member(archive)
            if member is None:
                return None
            prefix = member[: -len(PICKLE_MEMBER)]
            entries = sorted(
                (info.filename[len(prefix) :], info.CRC, info.file_size)
                for info in archive.infolist()
                if info.filename.startswith(prefix)
            )
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    digest = hashlib.sha256()
    for name, crc, size in entries:
        if name == SERIALIZATION_ID:
            continue
        if size and not crc:
            return None
        digest.update(f"{name}\0{crc:08x}\0{size}\n".encode())
    return "torch-content:" + digest.hexdigest()
