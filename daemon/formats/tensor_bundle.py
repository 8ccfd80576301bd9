"""TensorFlow's tensor bundle (`prefix.index` + `prefix.data-0000S-of-0000N`), read without TF.

The `.index` file is a LevelDB-format table (TF's `core/lib/io/table`): data blocks of
prefix-compressed `key -> value` entries, an index block pointing at them, and a 48-byte footer
(metaindex and index block handles, padding, magic 0xdb4775248b80fb57). Every block is followed
by a 5-byte trailer: its compression (0 none, 1 snappy) and the masked crc32c of the block plus
that byte, which TF always checks. TF writes bundles uncompressed since 1.2
(`TableBuilderOptions()` in tensor_bundle.cc: "compressed tables cannot be read by TensorFlow
releases prior to 1.1"), so a snappy block is refused with that reason rather than decoded.
The key "" holds a BundleHeaderProto; every other key a BundleEntryProto saying where the
tensor's bytes are in which data shard (with their crc32c).
Keys starting with a 0 byte are slices of partitioned variables, which TF's reader hides too.

Every length is hostile: the index is read whole but capped, every handle and length is checked
against what is there before anything is sliced or allocated, and tensor reads are capped.
Files are opened with `fs.beneath` (never through a symlink). Field numbers are those of TF's
`tensor_bundle.proto` and `tensor_shape.proto`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CorruptCheckpoint, WireError
from ..core.protowire import LENGTH, VARINT, as_int64, crc32c, fields, read_varint
from ..fs import beneath

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_LEN = 48
TRAILER_LEN = 5  # compression type byte + masked crc32c
MAX_INDEX_BYTES = 64 << 20  # a million variables take ~60 MB of index; beyond is not a bundle
MAX_ENTRIES = 1_000_000
MAX_TENSOR_BYTES = 64 << 20  # the object graph of the largest models is a few MB
_MASK_DELTA = 0xA282EAD8
_NO_COMPRESSION, _SNAPPY = 0, 1
_LITTLE_ENDIAN = 0
DT_STRING = 7


def _corrupt(index: Path, why: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{index.name}: {why}")


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Entry:
    """Where one tensor is: BundleEntryProto's fields."""

    dtype: int  # TF's DataType enum value (1 float32, 9 int64, 7 string, 20 resource...)
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    sliced: bool  # a partitioned variable: its bytes are in per-slice entries


@dataclass(frozen=True)
class Bundle:
    prefix: Path
    num_shards: int
    entries: dict[str, Entry]  # in key order, header and slice keys left out

    def shard(self, shard_id: int) -> Path:
        return self.prefix.with_name(
            f"{self.prefix.name}.data-{shard_id:05d}-of-{self.num_shards:05d}"
        )


def read_capped(path: Path, cap: int) -> bytes | None:
    """The whole regular file `path` (no symlink followed), or None if it holds over `cap`
    bytes. Sized by fstat first: a buffer is only ever as large as the file."""
    with os.fdopen(beneath.open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            return None
        data = f.read(size + 1)  # one more: a file still growing is not cut silently
    return None if len(data) > cap else data


# -- the table ---------------------------------------------------------------------------------


def _handle(buf: bytes, pos: int) -> tuple[int, int, int]:
    offset, pos = read_varint(buf, pos)
    size, pos = read_varint(buf, pos)
    return offset, size, pos


def _block(index: Path, table: bytes, offset: int, size: int) -> bytes:
    # The table's own length bounds every handle: a handle claiming 2^40 bytes stops here.
    end = len(table) - FOOTER_LEN
    if offset > end or size > end - offset - TRAILER_LEN:
        raise _corrupt(index, f"block at byte {offset} claims {size:,} bytes past the table's end")
    kind = table[offset + size]
    (stored,) = struct.unpack_from("<I", table, offset + size + 1)
    if mask(crc32c(table[offset : offset + size + 1])) != stored:
        raise _corrupt(index, f"block checksum mismatch at byte {offset}")
    raw = table[offset : offset + size]
    if kind == _SNAPPY:
        raise _corrupt(index, f"block at byte {offset} is snappy-compressed (TF 1.1?): not read")
    if kind != _NO_COMPRESSION:
        raise _corrupt(index, f"block at byte {offset} has unknown compression type {kind}")
    return raw


def _block_entries(index: Path, block: bytes) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise _corrupt(index, "block shorter than its restart count")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    if restarts > (len(block) - 4) // 4:
        raise _corrupt(index, f"block claims {restarts:,} restart points")
    limit = len(block) - 4 - 4 * restarts
    out: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = read_varint(block, pos)
        unshared, pos = read_varint(block, pos)
        value_len, pos = read_varint(block, pos)
        if shared > len(key) or unshared + value_len > limit - pos:
            raise _corrupt(index, f"block entry at byte {pos} runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        out.append((key, block[pos : pos + value_len]))
        pos += value_len
        if len(out) > MAX_ENTRIES:
            raise _corrupt(index, f"more than {MAX_ENTRIES:,} entries")
    return out


def table_items(index: Path, table: bytes) -> list[tuple[bytes, bytes]]:
    """Every `(key, value)` of a LevelDB-format table, in key order."""
    if len(table) < FOOTER_LEN or int.from_bytes(table[-8:], "little") != TABLE_MAGIC:
        raise CorruptCheckpoint("index file truncated or not a TF checkpoint index")
    footer = table[-FOOTER_LEN:]
    try:
        _, _, pos = _handle(footer, 0)  # the metaindex: TF writes it empty
        offset, size, _ = _handle(footer, pos)
        items: list[tuple[bytes, bytes]] = []
        for _, handle in _block_entries(index, _block(index, table, offset, size)):
            block_offset, block_size, _ = _handle(handle, 0)
            items += _block_entries(index, _block(index, table, block_offset, block_size))
            if len(items) > MAX_ENTRIES:
                raise _corrupt(index, f"more than {MAX_ENTRIES:,} entries")
    except WireError as exc:
        raise _corrupt(index, str(exc)) from None
    return items


# -- the bundle --------------------------------------------------------------------------------


def _shape(buf: bytes) -> tuple[int, ...]:
    dims = []
    for number, wire, value in fields(buf):
        if number == 2 and wire == LENGTH:
            assert isinstance(value, bytes)
            size = next((v for n, w, v in fields(value) if n == 1 and w == VARINT), 0)
            assert isinstance(size, int)
            dims.append(as_int64(size))
    return tuple(dims)


def _entry(buf: bytes) -> Entry:
    got: dict[str, object] = {"dtype": 0, "shape": (), "shard_id": 0, "offset": 0, "size": 0}
    got["crc32c"], got["sliced"] = 0, False
    names = {1: "dtype", 3: "shard_id", 4: "offset", 5: "size"}
    for number, wire, value in fields(buf):
        if number in names and wire == VARINT:
            got[names[number]] = value
        elif number == 2 and wire == LENGTH:
            assert isinstance(value, bytes)
            got["shape"] = _shape(value)
        elif number == 6 and isinstance(value, bytes) and len(value) == 4:
            got["crc32c"] = int.from_bytes(value, "little")
        elif number == 7:
            got["sliced"] = True
    return Entry(**got)  # type: ignore[arg-type]


def _header(index: Path, buf: bytes) -> int:
    num_shards, endianness = 1, _LITTLE_ENDIAN
    for number, wire, value in fields(buf):
        if wire == VARINT and number == 1:
            assert isinstance(value, int)
            num_shards = value
        elif wire == VARINT and number == 2:
            assert isinstance(value, int)
            endianness = value
    if endianness != _LITTLE_ENDIAN:
        raise _corrupt(index, "a big-endian bundle: not read")
    if not 1 <= num_shards <= 99999:
        raise _corrupt(index, f"header claims {num_shards} data shards")
    return num_shards


def read_bundle(prefix: Path) -> Bundle:
    """The header and entries of `prefix.index` (OSError and NotARegularFile pass through)."""
    index = prefix.with_name(prefix.name + ".index")
    table = read_capped(index, MAX_INDEX_BYTES)
    if table is None:
        raise _corrupt(index, f"over {MAX_INDEX_BYTES >> 20} MiB: not a bundle index")
    num_shards, entries = 1, {}
    try:
        for key, value in table_items(index, table):
            if key == b"":
                num_shards = _header(index, value)
            elif not key.startswith(b"\x00"):  # a slice of a partitioned variable
                entries[key.decode("utf-8", "replace")] = _entry(value)
    except WireError as exc:
        raise _corrupt(index, f"entry not a BundleEntryProto ({exc})") from None
    for name, entry in entries.items():
        if entry.shard_id >= num_shards and not entry.sliced:
            raise _corrupt(index, f"{name} is in shard {entry.shard_id} of {num_shards}")
    return Bundle(prefix, num_shards, entries)


def tensor_bytes(
    bundle: Bundle, key: str, limit: int = MAX_TENSOR_BYTES, *, check: bool = True
) -> bytes:
    """The stored bytes of one tensor, checked against the entry's crc32c as TF does (a
    string tensor's crc covers other bytes: `string_scalar` checks it)."""
    entry = bundle.entries[key]
    if entry.size > limit:
        raise CorruptCheckpoint(f"{key} claims {entry.size:,} bytes (more than {limit:,} read)")
    shard = bundle.shard(entry.shard_id)
    with os.fdopen(beneath.open_regular(shard), "rb") as f:
        present = os.fstat(f.fileno()).st_size
        data = b""
        if entry.offset + entry.size <= present:  # never a buffer larger than the file
            f.seek(entry.offset)
            data = f.read(entry.size)
    if len(data) < entry.size:
        raise CorruptCheckpoint(
            f"data shard shorter than its index says ({key} ends at byte "
            f"{entry.offset + entry.size:,} of {shard.name})"
        )
    if check and mask(crc32c(data)) != entry.crc32c:
        raise CorruptCheckpoint(f"{key}: checksum does not match the index ({shard.name})")
    return data


def string_scalar(bundle: Bundle, key: str, limit: int = MAX_TENSOR_BYTES) -> bytes:
    """A DT_STRING scalar: `varint64 length`, `uint32 masked crc32c(length as uint32)`, bytes.
    The entry's crc32c covers the length as uint32 (not its varint), that checksum and the
    bytes (WriteStringTensor in TF's tensor_bundle.cc)."""
    data = tensor_bytes(bundle, key, limit, check=False)
    try:
        length, pos = read_varint(data, 0)
    except WireError as exc:
        raise CorruptCheckpoint(f"{key}: {exc}") from None
    if pos + 4 + length != len(data):
        raise CorruptCheckpoint(f"{key}: string of {length:,} bytes in a {len(data):,}-byte tensor")
    width = 4 if length <= 0xFFFFFFFF else 8
    (stored,) = struct.unpack_from("<I", data, pos)
    crc = crc32c(length.to_bytes(width, "little"))
    if mask(crc) != stored:
        raise CorruptCheckpoint(f"{key}: string length checksum mismatch")
    if mask(crc32c(data[pos:], crc)) != bundle.entries[key].crc32c:
        raise CorruptCheckpoint(f"{key}: checksum does not match the index")
    return data[pos + 4 :]
