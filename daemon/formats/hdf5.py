"""Open HDF5 checkpoints for metadata only: read-only, file locking off, closed right away.

Holding an HDF5 file open (or locking it) while a trainer rewrites it makes the trainer's save
fail and crashes `fit()`, so every open here is short.
Dataset shapes and dtypes come from object headers; no weight value is ever read.
"""

from __future__ import annotations

import errno
import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5g, h5l, h5o

from ..core.errors import CorruptCheckpoint, NotReady, UnreadableCheckpoint
from ..core.model import WeightInfo

SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class Limits:
    """What a checkpoint file may hold before we refuse to walk it: far above any Keras model
    (a 1,000-layer model with Adam has ~10,000 links, 5 levels), far below what makes libhdf5
    recurse itself to death (20,000 nested groups crash it) or a walk take minutes."""

    max_depth: int = 64
    max_links: int = 200_000
    max_attributes: int = 100_000  # in the whole file
    max_attributes_per_object: int = 4_096
    max_attribute_bytes: int = 16 << 20


LIMITS = Limits()
# The superblock may follow a user block of 512, 1024, 2048, ... bytes.
_SIGNATURE_OFFSETS = (0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def find_superblock(head: bytes) -> int | None:
    """Offset of the HDF5 signature within the first 64 KiB + 8 bytes of a file."""
    for offset in _SIGNATURE_OFFSETS:
        if head[offset : offset + 8] == SIGNATURE:
            return offset
    return None


def stored_eof(head: bytes, offset: int) -> int | None:
    """The end-of-file address the superblock records (v0-v3), or None if unparsable."""
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


def survey(f: h5py.File, limits: Limits = LIMITS) -> list[str]:
    """Walk every link of `f` without following any, within `limits`; return the file's
    references to data outside itself (external links, external raw storage, virtual datasets),
    one line each. Nothing is resolved, opened outside the file, or read from a dataset.

    Raises CorruptCheckpoint when the structure is beyond `limits` (too deep, too many links or
    attributes, an attribute too big), before any reader walks it.
    """
    outside: list[str] = []
    seen: set[tuple[int, int]] = set()
    totals = {"links": 0, "attributes": 0}
    root = h5g.open(f.id, b"/")
    _check_attributes(root, "/", limits, totals)
    stack: list[tuple[str, Any, int]] = [("", root, 0)]
    while stack:
        prefix, gid, depth = stack.pop()
        if depth >= limits.max_depth:
            raise CorruptCheckpoint(f"groups nested deeper than {limits.max_depth} levels")
        for name, kind in _links(gid, limits, totals):
            where = prefix + "/" + name.decode("utf-8", "replace")
            if kind == h5l.TYPE_EXTERNAL:
                filename, target = gid.links.get_val(name)
                outside.append(f"external link {where} -> {_text(filename)}:{_text(target)}")
                continue
            if kind != h5l.TYPE_HARD:  # soft links stay inside the file; never resolved anyway
                continue
            oid = h5o.open(gid, name)
            info = h5o.get_info(oid)
            if (info.fileno, info.addr) in seen:  # hard-link cycles and shared objects
                continue
            seen.add((info.fileno, info.addr))
            _check_attributes(oid, where, limits, totals, info.num_attrs)
            if isinstance(oid, h5g.GroupID):
                stack.append((where, oid, depth + 1))
            elif isinstance(oid, h5d.DatasetID):
                outside += _storage_outside(oid, where)
    return outside


def outside_note(outside: list[str]) -> str:
    shown = "; ".join(outside[:3]) + (f"; and {len(outside) - 3} more" if len(outside) > 3 else "")
    return f"refers to data outside the file, never followed: {shown}; split and compress refuse it"


def _links(gid: Any, limits: Limits, totals: dict[str, int]) -> list[tuple[bytes, int]]:
    found: list[tuple[bytes, int]] = []

    def collect(name: bytes, info: Any) -> bool | None:
        found.append((name, info.type))
        totals["links"] += 1
        return True if totals["links"] > limits.max_links else None

    gid.links.iterate(collect, info=True)
    if totals["links"] > limits.max_links:
        raise CorruptCheckpoint(f"more than {limits.max_links} HDF5 objects")
    return found


def _check_attributes(
    oid: Any, where: str, limits: Limits, totals: dict[str, int], count: int | None = None
) -> None:
    count = h5o.get_info(oid).num_attrs if count is None else count
    totals["attributes"] += count
    if count > limits.max_attributes_per_object:
        raise CorruptCheckpoint(f"{where} has {count} attributes (more than we read)")
    if totals["attributes"] > limits.max_attributes:
        raise CorruptCheckpoint(f"more than {limits.max_attributes} HDF5 attributes")
    for index in range(count):
        attr = h5a.open(oid, index=index)
        try:
            size = attr.get_storage_size()
        except RuntimeError:  # h5py raises on 0, the size of an empty attribute
            size = 0
        if size > limits.max_attribute_bytes:
            name = _text(attr.get_name())
            raise CorruptCheckpoint(
                f"attribute {name!r} of {where} holds {size} bytes (limit "
                f"{limits.max_attribute_bytes})"
            )


def _storage_outside(dataset: Any, where: str) -> list[str]:
    plist = dataset.get_create_plist()
    found = []
    if plist.get_external_count() > 0:
        found.append(f"external storage of {where} in {_text(plist.get_external(0)[0])}")
    if plist.get_layout() == h5d.VIRTUAL:
        sources = {_text(plist.get_virtual_filename(i)) for i in range(plist.get_virtual_count())}
        found.append(f"virtual dataset {where} from {', '.join(sorted(sources)) or '?'}")
    return found


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def member(group: h5py.Group, path: str) -> Any:
    """The object at `path` below `group` if every step of the way is a hard link, else None.

    A soft or external link is never resolved: an external link may name a file outside the
    root, or a FIFO whose open blocks forever (`group[name]` and `group.get(name)` follow them).
    """
    current: Any = group
    for part in path.split("/"):
        if not part:
            continue
        if not isinstance(current, h5py.Group):
            return None
        name = part.encode()
        links = current.id.links
        if not links.exists(name) or links.get_info(name).type != h5l.TYPE_HARD:
            return None
        current = _wrap(h5o.open(current.id, name))
    return current


def members(group: h5py.Group) -> Iterator[tuple[str, Any]]:
    """(name, object) of each hard-linked member of `group`, in name order."""
    names: list[bytes] = []

    def collect(name: bytes, info: Any) -> None:
        if info.type == h5l.TYPE_HARD:
            names.append(name)

    group.id.links.iterate(collect, info=True)
    for name in names:
        yield name.decode("utf-8", "replace"), _wrap(h5o.open(group.id, name))


def _wrap(oid: Any) -> Any:
    """The h5py object for a low-level id (what `group[name]` builds, much faster)."""
    if isinstance(oid, h5d.DatasetID):
        return h5py.Dataset(oid)
    if isinstance(oid, h5g.GroupID):
        return h5py.Group(oid)
    return h5py.Datatype(oid)


def datasets(group: h5py.Group) -> Iterator[tuple[str, h5py.Dataset]]:
    """Every dataset below `group` reached through hard links, with its path relative to it,
    depth first in name order (as h5py's `visititems`), each object once."""
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[str, Iterator[tuple[str, Any]]]] = [("", members(group))]
    while stack:
        prefix, pending = stack[-1]
        step = next(pending, None)
        if step is None:
            stack.pop()
            continue
        name, obj = step
        info = h5o.get_info(obj.id)
        if (info.fileno, info.addr) in seen:
            continue
        seen.add((info.fileno, info.addr))
        if isinstance(obj, h5py.Dataset):
            yield prefix + name, obj  # one at a time: 20,000 open datasets take ~250 MB
        elif isinstance(obj, h5py.Group):
            if len(stack) > LIMITS.max_depth:
                raise CorruptCheckpoint(f"groups nested deeper than {LIMITS.max_depth} levels")
            stack.append((f"{prefix}{name}/", members(obj)))


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
        return _text(value.item())
    return str(value)


def attr_list(obj: h5py.HLObject, name: str) -> list[str]:
    value = obj.attrs.get(name)
    if value is None:
        return []
    return [_text(v) for v in np.atleast_1d(value).tolist()]


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
    if dataset.shape != () or _storage_outside(dataset.id, dataset.name or ""):
        return None  # reading external or virtual storage would open another file
    value = dataset[()]
    if np.issubdtype(dataset.dtype, np.integer):
        return int(value)
    if np.issubdtype(dataset.dtype, np.floating):
        return float(value)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
