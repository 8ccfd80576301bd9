"""safetensors files: an 8-byte little-endian header length N, N bytes of JSON, the tensor bytes.

Only the header is read, and only once N is known to be sane: at most 100,000,000 bytes (the
reference reader's own bound) and within the file. The header must then describe the file
exactly as the reference reader (`safe_open`, 0.8) demands: every tensor's offsets inside the
buffer, its byte count that of its dtype and shape (at most 1,024 dimensions, the product bounded
as it is computed), the tensors tiling the buffer with no gap,
and the last one ending at the file's end (a truncated file keeps a valid header: only this
catches it; a safetensors writer renames its temp file into place, so a short file is broken).
"""

from __future__ import annotations

import json
import os
import struct
from typing import IO, Any

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind
from . import torch_state

MAGIC_BYTES = 8
MAX_HEADER_BYTES = 100_000_000
MAX_DIMS = 1024  # a model tensor has < 10 dimensions
DTYPE_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "C64": 8,
    "C128": 16,
}
# The torch names of those dtypes, so one vocabulary is shown for every torch-family format.
TORCH_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
TORCH_DTYPES |= {"I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8"}
TORCH_DTYPES |= {"U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool"}
TORCH_DTYPES |= {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}
TORCH_DTYPES |= {"C64": "complex64", "C128": "complex128"}


def looks_like(head: bytes, size: int) -> bool:
    """Eight bytes, then a JSON object: never an HDF5 file, a zip or a pickle (those start
    with their own magic). The header length is judged by `read`, with a reason."""
    if len(head) < MAGIC_BYTES + 1:
        return False
    return head[MAGIC_BYTES : MAGIC_BYTES + 1] == b"{" and size > MAGIC_BYTES


def header_metadata(raw: IO[bytes]) -> dict[str, str] | None:
    """The header's `__metadata__` (our artifact marker lives there), bounded like `read`."""
    header, _n, _size = _header(raw)
    metadata = header.get("__metadata__")
    return metadata if isinstance(metadata, dict) else None


def read(raw: IO[bytes]) -> CheckpointInfo:
    header, n, size = _header(raw)
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise CorruptCheckpoint("safetensors __metadata__ is not a map of strings")
    tensors = _tensors(header, size - MAGIC_BYTES - n)
    layers, n_params, total = torch_state.tensors_info(tensors)
    recorded: dict[str, Any] = {"epoch": None, "step": None, "metrics": {}}
    if metadata:
        recorded["metadata"] = dict(list(metadata.items())[:64])
    return CheckpointInfo(
        format=Format.SAFETENSORS,
        kind=Kind.WEIGHTS,
        backend="torch" if (metadata or {}).get("format") == "pt" else None,
        layers=layers,
        n_params=n_params,
        weights_bytes=total,
        recorded=recorded,
    )


def _header(raw: IO[bytes]) -> tuple[dict[str, Any], int, int]:
    """(the header as JSON, its length N, the file's size), N checked before it is read."""
    size = os.fstat(raw.fileno()).st_size
    raw.seek(0)
    head = raw.read(MAGIC_BYTES)
    if len(head) < MAGIC_BYTES:
        raise CorruptCheckpoint("safetensors file shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER_BYTES:
        raise CorruptCheckpoint(
            f"safetensors header claims {n} bytes (more than {MAX_HEADER_BYTES}): refused unread"
        )
    if n > size - MAGIC_BYTES:
        raise CorruptCheckpoint(
            f"safetensors header claims {n} bytes, the file has {size - MAGIC_BYTES} after "
            "its length (truncated)"
        )
    text = raw.read(n)
    try:
        header = json.loads(text)
    except RecursionError:
        raise CorruptCheckpoint("safetensors header nested too deep: refused") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(f"safetensors header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise CorruptCheckpoint("safetensors header is not a JSON object")
    return header, n, size


def _tensors(header: dict[str, Any], buffer: int) -> list[tuple[str, str, tuple[int, ...], int]]:
    spans: list[tuple[int, int, str]] = []
    out = []
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise CorruptCheckpoint(f"safetensors tensor {name}: not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPE_SIZES:
            raise CorruptCheckpoint(f"safetensors tensor {name}: unknown dtype {dtype!r}")
        if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
            raise CorruptCheckpoint(f"safetensors tensor {name}: shape {shape!r} is not a list")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
            raise CorruptCheckpoint(f"safetensors tensor {name}: bad data_offsets {offsets!r}")
        if len(shape) > MAX_DIMS:
            raise CorruptCheckpoint(
                f"safetensors tensor {name}: {len(shape)} dimensions (more than {MAX_DIMS})"
            )
        begin, end = offsets
        nbytes = _numel(shape) * DTYPE_SIZES[dtype]
        if end < begin or end - begin != nbytes:
            raise CorruptCheckpoint(
                f"safetensors tensor {name}: {dtype}{shape} needs {nbytes} bytes, "
                f"its offsets span {end - begin}"
            )
        spans.append((begin, end, name))
        out.append((name, TORCH_DTYPES.get(str(dtype), str(dtype)), tuple(shape), nbytes))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise CorruptCheckpoint(
                f"safetensors tensor {name} starts at {begin}, the previous one ends at {at}"
            )
        at = end
    if at != buffer:
        state = "truncated" if at > buffer else "with trailing bytes"
        raise CorruptCheckpoint(
            f"safetensors tensors cover {at} bytes, the file holds {buffer} ({state})"
        )
    return out


def _numel(shape: list[int]) -> int:
    """The product of `shape`, refused as soon as a running product passes 2**63 (50,000
    dims of 2**61 would make `math.prod` multiply numbers of millions of digits: minutes)."""
    n = 1
    for dim in shape:
        n *= dim
        if n >= 1 << 63:
            raise CorruptCheckpoint(f"safetensors shape of more than 2**63 elements: {shape[:8]}")
    return n


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62


def layout(raw: IO[bytes]) -> list[tuple[str, str, tuple[int, ...], int, int]]:
    """Each tensor as (name, safetensors dtype, shape, absolute offset in the file, bytes), once
    the header has passed every check of `read` (offsets inside the file, tiling the buffer):
    what a reader of the tensors' bytes may trust."""
    header, n, size = _header(raw)
    header.pop("__metadata__", None)
    _tensors(header, size - MAGIC_BYTES - n)  # refuses an inconsistent header, with the reason
    base = MAGIC_BYTES + n
    found = []
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        found.append((name, str(entry["dtype"]), tuple(entry["shape"]), base + begin, end - begin))
    return found
