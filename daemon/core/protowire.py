"""TFRecord framing and the protobuf wire format, decoded from bytes already read (pure).

TensorBoard event files are TFRecord files: each record is `uint64 length`, `uint32 masked
crc32c(length bytes)`, `length` bytes of data, `uint32 masked crc32c(data)`, all little-endian;
the data is one serialized protobuf message. Both halves are small and documented, so reading
them needs neither TensorFlow nor the protobuf package. Every input is hostile: lengths can lie,
varints can run on, a live writer leaves a truncated last record. Nothing here raises on bad bytes
except `WireError` (a ValueError) from the field decoders, which callers turn into notes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import WireError

_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")  # length, masked crc of the length's 8 bytes
_U32 = struct.Struct("<I")
MAX_VARINT_BYTES = 10  # 64 bits in 7-bit groups


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of `data`, continuing from `crc`. About 6 MB/s in pure Python, so
    callers check the records they use rather than every byte of a file."""
    crc ^= 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant (CRCs of CRCs stay sound)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Record:
    """One TFRecord's data; its CRC is checked on demand (`intact`), as it costs per byte."""

    offset: int  # of the record's header in the file
    data: bytes
    stored_crc: int

    @property
    def intact(self) -> bool:
        return masked_crc32c(self.data) == self.stored_crc


@dataclass(frozen=True)
class Framing:
    records: tuple[Record, ...]
    problem: str | None  # why reading stopped before the end of `data`, if it did
    truncated: bool  # the last record is incomplete (a live writer mid-record, or a cut file)


def split_tfrecords(data: bytes, max_records: int, max_record_bytes: int) -> Framing:
    """The records of a TFRecord byte string, up to the first that cannot be trusted: a length
    whose CRC is wrong (nothing after it can be framed), a length beyond `max_record_bytes`, an
    incomplete last record, or `max_records` reached."""
    records: list[Record] = []
    length_crcs: dict[int, int] = {}
    pos, size = 0, len(data)
    while pos < size:
        if len(records) >= max_records:
            return Framing(tuple(records), f"stopped after {max_records} records", False)
        if size - pos < _HEADER.size:
            return Framing(tuple(records), f"incomplete record header at byte {pos}", True)
        length, length_crc = _HEADER.unpack_from(data, pos)
        expected = length_crcs.get(length)
        if expected is None:  # records of one file have few distinct lengths
            expected = length_crcs[length] = masked_crc32c(data[pos : pos + 8])
        if expected != length_crc:
            return Framing(tuple(records), f"bad length CRC at byte {pos}", False)
        if length > max_record_bytes:
            problem = f"record of {length} bytes at byte {pos} exceeds {max_record_bytes}"
            return Framing(tuple(records), problem, False)
        end = pos + _HEADER.size + length + _U32.size
        if end > size:
            return Framing(tuple(records), f"incomplete record at byte {pos}", True)
        body = data[pos + _HEADER.size : end - _U32.size]
        (data_crc,) = _U32.unpack_from(data, end - _U32.size)
        records.append(Record(pos, body, data_crc))
        pos = end
    return Framing(tuple(records), None, False)


VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`; at most 10 bytes, 64 bits kept."""
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: most keys, lengths and steps
        return buf[pos], pos + 1
    value = shift = 0
    end = min(pos + MAX_VARINT_BYTES, len(buf))
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    start, taken = pos - shift // 7, shift // 7
    if taken < MAX_VARINT_BYTES:  # the buffer ended inside it
        raise WireError(f"varint cut short at byte {start}")
    raise WireError(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {start}")


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message: an int for varints, the
    raw bytes for fixed32/fixed64 and length-delimited fields. Raises WireError on bytes that
    cannot be a message (a length beyond the buffer, groups, unknown wire types). A list, and
    one-byte varints read inline: this loop is most of the cost of reading an event file."""
    out: list[tuple[int, int, int | bytes]] = []
    pos, size = 0, len(buf)
    while pos < size:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == LENGTH:
            if pos < size and buf[pos] < 0x80:
                length, pos = buf[pos], pos + 1
            else:
                length, pos = read_varint(buf, pos)
            if length > size - pos:
                raise WireError(f"field {number} claims {length} bytes, {size - pos} remain")
            value, pos = buf[pos : pos + length], pos + length
        elif wire == VARINT:
            value, pos = read_varint(buf, pos)
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > size:
                raise WireError(f"fixed{width * 8} field {number} cut short")
            value, pos = buf[pos : pos + width], pos + width
        else:
            raise WireError(f"unsupported wire type {wire} (field {number})")
        out.append((number, wire, value))
    return out


def as_int64(value: int) -> int:
    """A varint as protobuf's int64 (two's complement; -1 is ten bytes on the wire)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def as_int32(value: int) -> int:
    """A varint as protobuf's int32 (negative ones are sign-extended to 64 bits on the wire)."""
    return ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def repeated(wire: int, value: int | bytes, width: int) -> list[int | bytes]:
    """The elements of a repeated scalar field: a packed run (length-delimited) or one element.
    `width` is 4 or 8 for fixed-width elements, 0 for varints."""
    if wire != LENGTH:
        return [value]
    assert isinstance(value, bytes)
    if width:
        if len(value) % width:
            raise WireError(f"packed field of {len(value)} bytes is not a multiple of {width}")
        return [value[i : i + width] for i in range(0, len(value), width)]
    out: list[int | bytes] = []
    pos = 0
    while pos < len(value):
        number, pos = read_varint(value, pos)
        out.append(number)
    return out
