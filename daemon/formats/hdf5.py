"""Open HDF5 checkpoints for metadata only: read-only, file locking off, closed right away.

Holding an HDF5 file open (or locking it) while a trainer rewrites it makes the trainer's save
fail and crashes `fit()` (shared/design/keras-formats.md §5), so every open here is short.
Dataset shapes and dtypes come from object headers; no weight value is ever read.
"""

from __future__ import annotations

import errno
import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import h5py
import numpy as np

from daemon.errors import CorruptCheckpoint, NotReady, UnreadableCheckpoint
from daemon.model import WeightInfo

SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The superblock may follow a user block of 512, 1024, 2048, ... bytes.
_SIGNATURE_OFFSETS = (0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def find_superblock(head: bytes) -> int | None:
    """Offset of the HDF5 signature within the first 64 KiB + 8 bytes of a file."""
    for offset in _SIGNATURE_OFFSETS:
        if head[offset : offset + 8] == SIGNATURE:
            return offset
    return None


def stored_eof(head: bytes, offset: int) -> int | None:
    """The end-of-file address the superblock records (v0-v3), or None if unparseable."""
    sb = head[offset:]
    if len(sb) < 16:
        return None
    version = sb[8]
    if version in (0, 1):
        size_of_offsets, base_at = sb[13], 24 + (4 if version == 1 else 0)
    elif version in (2, 3):
        size_of_offsets, base_at = sb[9], 12
    else:
        return None
    fmt = {4: "<I", 8: "<Q"}.get(size_of_offsets)
    eof_at = base_at + 2 * size_of_offsets  # after the base and one more address field
    if fmt is None or len(sb) < eof_at + size_of_offsets:
        return None
    # Measured with h5py 3.14 / HDF5 1.14: the recorded end of file already counts a user block.
    eof: int = struct.unpack_from(fmt, sb, eof_at)[0]
    return eof


def check_eof(head: bytes, size: int) -> str | None:
    """A one-line problem if the recorded end of file disagrees with the real size, else None.

    A shorter file is truncated (or still being written); a longer one with a stale superblock is
    what an HDF5 writer leaves on disk until it closes the file.
    """
    offset = find_superblock(head)
    if offset is None:
        return "no HDF5 signature"
    eof = stored_eof(head, offset)
    if eof is None:
        return None
    if size < eof:
        return f"truncated: HDF5 end of file is {eof} bytes, the file has {size}"
    if size > eof:
        return f"HDF5 end of file is {eof} bytes but the file has {size}: still being written?"
    return None


@contextmanager
def open_h5(source: str | IO[bytes]) -> Iterator[h5py.File]:
    """h5py.File read-only with locking off; open errors become our reader outcomes."""
    try:
        handle = h5py.File(source, "r", locking=False)
    except BlockingIOError as exc:
        raise NotReady(f"locked by its writer ({exc.strerror or exc})") from exc
    except PermissionError as exc:
        raise UnreadableCheckpoint(f"permission denied: {exc.strerror or exc}") from exc
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.EIO:
            raise UnreadableCheckpoint(f"I/O error: {exc}") from exc
        raise CorruptCheckpoint(f"HDF5 open failed: {_first_line(exc)}") from exc
    try:
        yield handle
    finally:
        handle.close()


def datasets(group: h5py.Group) -> Iterator[tuple[str, h5py.Dataset]]:
    """Every dataset below `group`, with its path relative to it (h5py's alphabetical order)."""
    found: list[tuple[str, h5py.Dataset]] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found.append((name, obj))

    group.visititems(visit)
    return iter(found)


def weight_info(name: str, dataset: h5py.Dataset) -> WeightInfo:
    return WeightInfo(
        name=name, shape=tuple(int(n) for n in dataset.shape), dtype=str(dataset.dtype)
    )


def n_elements(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def nbytes(dataset: h5py.Dataset) -> int:
    return n_elements(tuple(dataset.shape)) * dataset.dtype.itemsize


def attr_text(obj: h5py.HLObject, name: str) -> str | None:
    value = obj.attrs.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return attr_text_from_scalar(value.item())
    return str(value)


def attr_text_from_scalar(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def attr_list(obj: h5py.HLObject, name: str) -> list[str]:
    value = obj.attrs.get(name)
    if value is None:
        return []
    return [attr_text_from_scalar(v) for v in np.atleast_1d(value).tolist()]


def attr_json(obj: h5py.HLObject, name: str) -> Any:
    text = attr_text(obj, name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptCheckpoint(f"attribute {name!r} is not valid JSON: {exc}") from exc


def read_scalar(dataset: h5py.Dataset) -> float | int | None:
    """The value of a scalar dataset (an optimizer's iteration count or learning rate): 8 bytes."""
    if dataset.shape != ():
        return None
    value = dataset[()]
    if np.issubdtype(dataset.dtype, np.integer):
        return int(value)
    if np.issubdtype(dataset.dtype, np.floating):
        return float(value)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
