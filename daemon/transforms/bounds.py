"""What split and compress take on, checked before they start: a legal but hostile HDF5 file is
refused with a one-line reason instead of crashing (RecursionError on a 2,000-deep chain) or
running for hours (a 70 KB file declaring a 4 TiB dataset that stores nothing: every byte of
it would be read, encoded and verified).

One walk over the object headers, iterative (no recursion, whatever the depth), each object
once (hard links to one object are met once; a group reached twice, e.g. a link cycle, is
refused: a copy would duplicate or never end). Data is never read.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import h5py

from ..core.errors import TooHostile
from ..core.units import format_size
from ..formats import hdf5, window
from ..formats.file_detect import ZIP_MAGIC
from ..formats.keras_v3 import WEIGHTS_MEMBER

MAX_DEPTH = 256  # Keras files nest fewer than 20 groups deep
MAX_OBJECTS = 1_000_000  # a big Keras model has tens of thousands
# A dataset may declare more bytes than it stores (compressed, or fill values never written),
# but beyond this factor and this size, rewriting it means hours of reading nothing.
SPARSE_FACTOR = 64
SPARSE_SLACK = 1 << 30


def check_file(source: Path) -> None:
    """`check` on an HDF5 file, or on the weights of a `.keras` archive; anything else is left
    to the readers. Run first: before any reader walks a hostile file."""
    with open(source, "rb") as raw:
        head = raw.read(65536 + 8)
        raw.seek(0)
        if head[:4] in ZIP_MAGIC:
            with zipfile.ZipFile(raw) as archive:
                if WEIGHTS_MEMBER not in archive.namelist():
                    return
                with (
                    window.open_member(archive, raw, WEIGHTS_MEMBER) as member,
                    hdf5.open_h5(member) as f,
                ):
                    check(f, source)
            return
    if hdf5.find_superblock(head) is not None:
        with hdf5.open_h5(str(source)) as f:
            check(f, source)


def check(f: h5py.Group, source: Path) -> None:
    """Raise TooHostile if rewriting `f` (the HDF5 content of `source`) would go beyond the
    limits above."""
    seen: set[int] = set()
    stack: list[tuple[h5py.Group, int]] = [(f, 0)]
    while stack:
        group, depth = stack.pop()
        for name in group:
            if not isinstance(group.get(name, getlink=True), h5py.HardLink):
                continue  # soft and external links: never followed
            obj = group[name]
            address = h5py.h5o.get_info(obj.id).addr
            if address in seen:
                if isinstance(obj, h5py.Group):
                    raise TooHostile(f"not rewritten: {source}: group {name!r} is linked twice")
                continue
            seen.add(address)
            if len(seen) > MAX_OBJECTS:
                raise TooHostile(f"not rewritten: {source} holds over {MAX_OBJECTS} objects")
            if isinstance(obj, h5py.Group):
                if depth + 1 > MAX_DEPTH:
                    raise TooHostile(
                        f"not rewritten: {source} nests groups deeper than {MAX_DEPTH} levels "
                        "(Keras files nest fewer than 20)"
                    )
                stack.append((obj, depth + 1))
            elif isinstance(obj, h5py.Dataset):
                _check_dataset(obj, name, source)


def _check_dataset(dset: h5py.Dataset, name: str, source: Path) -> None:
    declared = 0 if dset.shape is None else dset.size * dset.dtype.itemsize
    stored = dset.id.get_storage_size()
    if declared > SPARSE_SLACK and declared > SPARSE_FACTOR * stored:
        raise TooHostile(
            f"not rewritten: {source}: dataset {dset.name!r} declares {format_size(declared)} but "
            f"stores {format_size(stored)} (unallocated or absurdly sparse)"
        )
