"""A seekable read-only view of one member of a zip archive, for h5py's file-object driver.

Keras stores `model.weights.h5` uncompressed, so the member is a byte range of the outer file:
h5py can seek around in it directly. Through `zipfile.ZipExtFile` every backward seek re-reads
the stream (16.5 s instead of 0.38 s on a 308 MB archive).
"""

from __future__ import annotations

import errno
import io
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from ..core.errors import CorruptCheckpoint

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_EOCD = struct.Struct("<4sHHHHIIH")
_EOCD_MAGIC = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<IIQI")
_ZIP64_LOCATOR_MAGIC = 0x07064B50
_ZIP64_EOCD = struct.Struct("<IQHHIIQQQQ")
# A Keras archive has 3 members (plus assets); a member that expands more than MAX_RATIO times
# is not a model (float weights deflate by 1.1-2x, even all-zero ones by ~1,000x).
MAX_MEMBERS = 10_000
MAX_DIRECTORY_BYTES = 4 << 20
MAX_RATIO = 200
IN_MEMORY_BYTES = 64 << 20
_SMALL = 1 << 20  # members below this are never a bomb worth refusing


class Window(io.RawIOBase):
    def __init__(self, raw: IO[bytes], start: int, length: int) -> None:
        super().__init__()
        self._raw, self._start, self._length, self._pos = raw, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._length}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), max(0, self._length - self._pos))
        if wanted == 0:
            return 0
        self._raw.seek(self._start + self._pos)
        got = self._raw.readinto(memoryview(buffer)[:wanted])  # type: ignore[attr-defined]
        self._pos += got or 0
        return got or 0


class _Stream(io.RawIOBase):
    """A compressed member as a raw seekable stream: what `io.BufferedReader` needs."""

    def __init__(self, member: IO[bytes]) -> None:
        super().__init__()
        self._member = member

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._member.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._member.seek(offset, whence)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._member.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)


def member_offset(raw: IO[bytes], info: zipfile.ZipInfo) -> int:
    """Where the member's data starts: after its local header, whose extra field may differ
    from the central directory's."""
    raw.seek(info.header_offset)
    header = raw.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != _LOCAL_MAGIC:
        raise CorruptCheckpoint(f"zip local header of {info.filename} is damaged")
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def check_directory(raw: IO[bytes]) -> None:
    """Refuse an archive whose central directory lists more members than a Keras archive could
    hold, before `zipfile` builds an object for each of them (a 100,000-member zip)."""
    size = raw.seek(0, os.SEEK_END)
    tail_at = max(0, size - _EOCD.size - 65535)
    raw.seek(tail_at)
    tail = raw.read()
    at = tail.rfind(_EOCD_MAGIC)
    if at < 0 or len(tail) < at + _EOCD.size:
        return  # zipfile explains what is wrong
    entries, directory_bytes = _EOCD.unpack_from(tail, at)[4:6]
    if (entries == 0xFFFF or directory_bytes == 0xFFFFFFFF) and at >= _ZIP64_LOCATOR.size:
        locator = _ZIP64_LOCATOR.unpack_from(tail, at - _ZIP64_LOCATOR.size)
        if locator[0] == _ZIP64_LOCATOR_MAGIC:
            raw.seek(locator[2])
            record = raw.read(_ZIP64_EOCD.size)
            if len(record) == _ZIP64_EOCD.size:
                entries, directory_bytes = _ZIP64_EOCD.unpack(record)[7:9]
    if entries > MAX_MEMBERS or directory_bytes > MAX_DIRECTORY_BYTES:
        raise CorruptCheckpoint(
            f"zip archive lists {entries} members in {directory_bytes} bytes: "
            "not a Keras archive (refused unread)"
        )


def check_expansion(info: zipfile.ZipInfo, limit: int | None = None) -> None:
    """Refuse a member that declares more than `limit` bytes, or that would expand absurdly
    (a zip bomb: 1 GB of zeros deflates to 1 MB)."""
    if limit is not None and info.file_size > limit:
        raise CorruptCheckpoint(
            f"{info.filename} in the archive declares {info.file_size} bytes (more than {limit})"
        )
    if (
        info.compress_type != zipfile.ZIP_STORED
        and info.file_size > _SMALL
        and (info.file_size > MAX_RATIO * max(info.compress_size, 1))
    ):
        raise CorruptCheckpoint(
            f"{info.filename} in the archive expands {info.compress_size} bytes to "
            f"{info.file_size}: a zip bomb? refused unread"
        )


def read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """The bytes of a small member (config.json), never more than `limit` whatever it claims."""
    info = archive.getinfo(name)
    check_expansion(info, limit)
    try:
        with archive.open(info) as member:
            data = member.read(limit + 1)
    except (zipfile.BadZipFile, EOFError, zlib.error, ValueError, NotImplementedError) as exc:
        # a bad local header (its name not UTF-8, an offset past 2**63, its version or method),
        # CRC or stream: each found by fuzzing (tests/fuzz_corpus)
        raise CorruptCheckpoint(f"{name} in the archive cannot be read: {exc}") from exc
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        # a header offset before the file's start: zipfile seeks there
        raise CorruptCheckpoint(f"{name} in the archive starts before the file") from exc
    if len(data) > limit or len(data) != info.file_size:
        raise CorruptCheckpoint(f"{name} in the archive does not hold its declared size")
    return data


@contextmanager
def open_member(archive: zipfile.ZipFile, raw: IO[bytes], name: str) -> Iterator[IO[bytes]]:
    """A seekable file object for member `name`: a window if stored, else decompressed on the
    fly within bounds (never extracted to a file)."""
    info = archive.getinfo(name)
    if info.compress_type == zipfile.ZIP_STORED:
        start = member_offset(raw, info)
        raw.seek(0, os.SEEK_END)
        if start + info.file_size > raw.tell():
            raise CorruptCheckpoint(f"{name} extends past the end of the archive (truncated)")
        yield io.BufferedReader(Window(raw, start, info.file_size), buffer_size=1 << 16)
        return
    # A recompressed archive (zip -9 on a .keras). Never extracted to a file: a small member is
    # decompressed into memory (bounded by its declared size, checked), a big one is read as a
    # stream (seekable, slow backwards, bounded memory).
    check_expansion(info)
    try:
        if info.file_size <= IN_MEMORY_BYTES:
            yield io.BytesIO(read_member(archive, name, IN_MEMORY_BYTES))
            return
        with archive.open(info) as member:
            yield io.BufferedReader(_Stream(member), buffer_size=1 << 16)
    except (zipfile.BadZipFile, EOFError, zlib.error, ValueError, NotImplementedError) as exc:
        raise CorruptCheckpoint(f"{name} in the archive cannot be decompressed: {exc}") from exc
