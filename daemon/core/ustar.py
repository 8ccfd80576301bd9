"""The ustar (POSIX.1-1988) headers of the one tar object a checkpoint of several files tiers
as: written deterministically, read defensively. Pure: bytes in, bytes or values out.

Written: the members in the catalog's recorded order, each folder on their way as a folder entry
just before its first file, every field fixed from the catalog's view (mode 0644 for files and
0755 for folders, uid/gid 0, no user or group names, one mtime: the checkpoint's indexed
newest mtime), so the same checkpoint always streams the same bytes (a retried upload resumes
and lands on the same key and checksum). A size beyond the 11 octal digits (8 GiB) is written
in base-256, as GNU tar and Python's tarfile read it.

Read: only regular files and folders, names of ustar's own fields (at most 255 bytes, UTF-8,
relative, no `.`, `..` or empty part), a valid checksum and magic; anything else (links,
devices, FIFOs, pax or GNU long-name records, an absolute or escaping name) is refused.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import BadArchive

BLOCK = 512
END = bytes(2 * BLOCK)  # two zero blocks end an archive
FILE_MODE, FOLDER_MODE = 0o644, 0o755
_NAME, _PREFIX = 100, 155
_OCTAL_SIZE_MAX = 8**11 - 1
_MAGIC = b"ustar\x0000"


class Kind(enum.Enum):
    FILE = "file"
    FOLDER = "folder"


@dataclass(frozen=True)
class Entry:
    name: str  # relative, `/`-separated, no trailing `/`
    kind: Kind
    size: int  # 0 for a folder


def padding(size: int) -> int:
    """The zero bytes after a member's data, up to the next block."""
    return -size % BLOCK


def entries(names: Sequence[str], sizes: Sequence[int]) -> list[Entry]:
    """The archive's entries for files `names` (in this order) of `sizes`: each folder on
    their way once, just before the first file below it."""
    seen: set[str] = set()
    out: list[Entry] = []
    for name, size in zip(names, sizes, strict=True):
        check_name(name)
        if name in seen:
            raise BadArchive(f"{name}: twice in one archive")
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in seen:
                seen.add(folder)
                out.append(Entry(folder, Kind.FOLDER, 0))
        seen.add(name)
        out.append(Entry(name, Kind.FILE, size))
    return out


def header(entry: Entry, mtime: int) -> bytes:
    """The 512-byte header of `entry` with the fixed fields and `mtime` (seconds)."""
    folder = entry.kind is Kind.FOLDER
    prefix, name = _split(entry.name + ("/" if folder else ""))
    block = bytearray(BLOCK)
    block[0:100] = name.ljust(_NAME, b"\0")
    block[100:108] = _octal(FOLDER_MODE if folder else FILE_MODE, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _size_field(entry.size)
    block[136:148] = _octal(mtime, 12)
    block[148:156] = b" " * 8
    block[156:157] = b"5" if folder else b"0"
    block[257:265] = _MAGIC
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[345:500] = prefix.ljust(_PREFIX, b"\0")
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def parse(block: bytes) -> Entry | None:
    """The entry a header block describes; None for a zero block (the archive's end). Raises
    BadArchive for anything but a regular file or a folder with a safe name."""
    if len(block) != BLOCK:
        raise BadArchive("the archive ends inside a header")
    if block == bytes(BLOCK):
        return None
    if block[257:265] != _MAGIC:
        raise BadArchive("not a ustar header (its magic)")
    stored = _number(block[148:156], "checksum")
    if stored != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise BadArchive("a header's checksum does not match")
    kind = {b"0": Kind.FILE, b"\0": Kind.FILE, b"5": Kind.FOLDER}.get(block[156:157])
    if kind is None:
        what = {b"1": "a hard link", b"2": "a symlink", b"3": "a device", b"4": "a device"}
        found = what.get(block[156:157], f"entry type {block[156:157]!r}")
        raise BadArchive(f"{found} in the archive: only regular files and folders are unpacked")
    name = _text(block[0:100])
    prefix = _text(block[345:500])
    full = f"{prefix}/{name}" if prefix else name
    if kind is Kind.FOLDER:
        full = full.removesuffix("/")
    check_name(full)
    size = _size(block[124:136])
    if kind is Kind.FOLDER and size:
        raise BadArchive(f"{full}: a folder entry with {size} bytes of data")
    return Entry(full, kind, size)


def check_name(name: str) -> None:
    """A member name safe to create beneath a folder: relative, no `.`/`..`/empty parts, no
    NUL, UTF-8, within ustar's 255 bytes."""
    if not name or name.startswith("/"):
        raise BadArchive(f"{name!r}: an absolute or empty name in the archive")
    if "\0" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise BadArchive(f"{name!r}: a name with `..`, `.` or an empty part in the archive")
    if len(name.encode("utf-8", "surrogateescape")) > _NAME + 1 + _PREFIX:
        raise BadArchive(f"{name[:60]!r}...: a name longer than a ustar header holds")


def _split(name: str) -> tuple[bytes, bytes]:
    raw = name.encode("utf-8")
    if len(raw) <= _NAME:
        return b"", raw
    # The prefix ends at a `/` (dropped), the rest fits the name field.
    for cut in range(min(len(raw) - 1, _PREFIX), 0, -1):
        if raw[cut : cut + 1] == b"/" and len(raw) - cut - 1 <= _NAME:
            return raw[:cut], raw[cut + 1 :]
    raise BadArchive(f"{name[:60]!r}...: a name that does not fit a ustar header")


def _octal(value: int, width: int) -> bytes:
    digits = b"%o" % value
    if len(digits) > width - 1:
        raise BadArchive(f"{value} does not fit a {width}-byte header field")
    return digits.rjust(width - 1, b"0") + b"\0"


def _size_field(size: int) -> bytes:
    if size <= _OCTAL_SIZE_MAX:
        return _octal(size, 12)
    return b"\x80" + size.to_bytes(11, "big")  # base-256 (GNU tar, Python's tarfile)


def _size(field: bytes) -> int:
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    return _number(field, "size")


def _number(field: bytes, what: str) -> int:
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text or any(c not in b"01234567" for c in text):
        raise BadArchive(f"a header's {what} is not an octal number")
    return int(text, 8)


def _text(field: bytes) -> str:
    raw = field.split(b"\0", 1)[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadArchive("a name in the archive is not UTF-8") from None
