"""TensorBoard event files built by hand: a protobuf wire-format encoder and TFRecord framing,
for the decoder's tests (pure; the real files come from Keras in child processes)."""

from __future__ import annotations

import struct

from ckpt_daemon.core.protowire import masked_crc32c


def varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_fixed32(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 5) + data


def field_fixed64(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 1) + data


def scalar_tensor(value: float, dtype: int = 1, how: str = "content") -> bytes:
    """A TensorProto holding one number: in `tensor_content` (as TensorFlow's summary writer
    does), or in `float_val` packed / unpacked, or `double_val`."""
    shape = field_bytes(2, b"")  # TensorShapeProto with no dims: a scalar
    head = field_varint(1, dtype) + shape
    fmt = {1: "<f", 2: "<d", 19: "<e", 3: "<i", 9: "<q"}[dtype]
    if how == "content":
        number = int(value) if dtype in (3, 9) else value
        return head + field_bytes(4, struct.pack(fmt, number))
    if how == "float_val_packed":
        return head + field_bytes(5, struct.pack("<f", value))
    if how == "float_val":
        return head + field_fixed32(5, struct.pack("<f", value))
    if how == "double_val":
        return head + field_bytes(6, struct.pack("<d", value))
    raise ValueError(how)


def plugin_metadata(name: str) -> bytes:
    return field_bytes(1, field_bytes(1, name.encode()))


def summary_value(
    tag: str,
    *,
    tensor: bytes | None = None,
    simple: float | None = None,
    plugin: str | None = "scalars",
) -> bytes:
    out = field_bytes(1, tag.encode())
    if simple is not None:
        out += field_fixed32(2, struct.pack("<f", simple))
    if tensor is not None:
        out += field_bytes(8, tensor)
    if plugin is not None:
        out += field_bytes(9, plugin_metadata(plugin))
    return out


def event(step: int, wall_time: float, *values: bytes) -> bytes:
    summary = b"".join(field_bytes(1, v) for v in values)
    return (
        field_fixed64(1, struct.pack("<d", wall_time))
        + field_varint(2, step)
        + (field_bytes(5, summary) if values else b"")
    )


def file_version_event(wall_time: float = 1.0) -> bytes:
    return field_fixed64(1, struct.pack("<d", wall_time)) + field_bytes(3, b"brain.Event:2")


def tfrecord(data: bytes, *, bad_length_crc: bool = False, bad_data_crc: bool = False) -> bytes:
    length = struct.pack("<Q", len(data))
    length_crc = masked_crc32c(length) ^ (1 if bad_length_crc else 0)
    data_crc = masked_crc32c(data) ^ (1 if bad_data_crc else 0)
    return length + struct.pack("<I", length_crc) + data + struct.pack("<I", data_crc)


def scalar_event(tag: str, step: int, value: float, wall_time: float = 100.0) -> bytes:
    """One record as Keras's TensorBoard callback writes it (float32 tensor, plugin scalars)."""
    return tfrecord(event(step, wall_time, summary_value(tag, tensor=scalar_tensor(value))))
