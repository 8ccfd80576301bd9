"""The HDF5 tree copy of `transforms.compress`: groups, links and attributes exactly (attribute
types included), plain numeric datasets re-chunked into ~4 MiB slabs whose chunks the codec's
pipe encodes, scalars and datasets under 1 KiB contiguous and raw, and every other dataset
(strings, compounds, references, named types) copied as stored (H5Ocopy)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from functools import partial
from typing import Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5o, h5p, h5s, h5t

from .chunk_codecs import ChunkCodec, ChunkPipe

SLAB_BYTES = 4 << 20  # chunk size: big chunks compress better than small ones
TINY_BYTES = 1024  # below this a chunk index and filter headers cost more than they save


def copy_all(src: h5py.Group, dst: h5py.Group, spec: ChunkCodec, pipe: ChunkPipe) -> int:
    count = _copy_group(src, dst, spec, pipe)
    pipe.drain()  # before the file closes
    return count


def _copy_group(src: h5py.Group, dst: h5py.Group, spec: ChunkCodec, pipe: ChunkPipe) -> int:
    _copy_attrs(src, dst)
    count = 0
    for name in src:  # creation order where the group tracks it, else by name
        link = src.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink | h5py.ExternalLink):
            dst[name] = link
            continue
        obj = src[name]
        plan = _plan(obj) if isinstance(obj, h5py.Dataset) else None
        if isinstance(obj, h5py.Group):
            child = dst.create_group(name, track_order=tracks_order(obj))
            count += _copy_group(obj, child, spec, pipe)
        elif plan == "copy" or plan is None:  # strings, compounds, references, empty spaces,
            h5o.copy(src.id, name.encode(), dst.id, name.encode())  # named types: as stored
            count += plan is not None
        else:
            _copy_dataset(obj, plan == "chunked", dst, name, spec, pipe)
            count += 1
    return count


def tracks_order(group: h5py.Group) -> bool:
    return bool(group.id.get_create_plist().get_link_creation_order())


def _plan(dset: h5py.Dataset) -> str:
    tid, shape = dset.id.get_type(), dset.shape
    plain = tid.get_class() in (h5t.INTEGER, h5t.FLOAT) and dset.dtype.itemsize == tid.get_size()
    if shape is None or not plain:
        return "copy"
    return "chunked" if shape and math.prod(shape) * tid.get_size() >= TINY_BYTES else "contiguous"


def _copy_dataset(
    src: h5py.Dataset,
    chunked: bool,
    group: h5py.Group,
    name: str,
    spec: ChunkCodec,
    pipe: ChunkPipe,
) -> None:
    shape, tid = src.shape, src.id.get_type()
    chunk = chunk_shape(shape, tid.get_size())
    dcpl = spec.dcpl(chunk) if chunked else h5p.create(h5p.DATASET_CREATE)
    dcpl.set_attr_creation_order(src.id.get_create_plist().get_attr_creation_order())
    dst = h5py.Dataset(
        h5d.create(group.id, name.encode(), tid, h5s.create_simple(shape), dcpl=dcpl)
    )
    _copy_attrs(src, dst)
    if not chunked:
        if math.prod(shape):
            dst.write_direct(np.asarray(src[()]))
        return
    for offset, sel in grid(shape, chunk):
        if spec.encoder is None:
            dst[sel] = src[sel]  # HDF5 runs the filters (one core)
        else:
            pipe.put(dst, offset, partial(spec.encode, _read_chunk(src, sel, chunk)))


def chunk_shape(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The whole dataset up to SLAB_BYTES; else equal slabs along axis 0 (and further axes if a
    single row is bigger), so chunks stay near SLAB_BYTES and the last one is not a sliver."""
    chunk = list(shape)
    for axis, extent in enumerate(shape):
        size = itemsize * math.prod(chunk)
        if size <= SLAB_BYTES:
            break
        per_unit = size // extent
        pieces = math.ceil(extent / max(1, SLAB_BYTES // per_unit))
        chunk[axis] = math.ceil(extent / pieces)
    return tuple(chunk)


def grid(shape: tuple[int, ...], chunk: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], Any]]:
    """(chunk offset, selection clipped to the dataset) for every chunk, in storage order."""
    starts = [range(0, n, c) for n, c in zip(shape, chunk, strict=True)]
    for offset in itertools.product(*starts):
        sel = tuple(slice(o, min(o + c, n)) for o, c, n in zip(offset, chunk, shape, strict=True))
        yield offset, sel


def _read_chunk(src: h5py.Dataset, sel: tuple[slice, ...], chunk: tuple[int, ...]) -> np.ndarray:
    # HDF5 stores edge chunks full size: pad the part beyond the dataset with zeros.
    part = tuple(s.stop - s.start for s in sel)
    buf = np.empty(chunk, src.dtype) if part == chunk else np.zeros(chunk, src.dtype)
    src.read_direct(buf, source_sel=sel, dest_sel=tuple(slice(0, n) for n in part))
    return buf


def _copy_attrs(src: h5py.HLObject, dst: h5py.HLObject) -> None:
    """Every attribute with its exact HDF5 type and space (string sets, padding, lengths)."""
    for name in src.attrs:
        old = h5a.open(src.id, name.encode())
        new = h5a.create(dst.id, name.encode(), old.get_type(), old.get_space())
        if old.shape is not None:  # a null dataspace holds no value
            value = np.zeros(old.shape, old.dtype)
            old.read(value)
            new.write(value)
