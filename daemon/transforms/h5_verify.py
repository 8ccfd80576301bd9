"""The read-back check of `transforms.compress`: a rewritten HDF5 tree holds what its source
holds, read through HDF5 (so through the new filters): the same members, links, attributes with
their exact types, shapes, types and values bit for bit."""

from __future__ import annotations

import math
from typing import Any

import h5py
import numpy as np
from h5py import h5a

from ..core.errors import VerifyFailed
from .h5_copy import chunk_shape, grid


def verify_group(src: h5py.Group, dst: h5py.Group) -> None:
    _verify_attrs(src, dst)
    if sorted(src) != sorted(dst):
        raise VerifyFailed(f"{dst.name}: members differ from the source's")
    for name in src:
        link = src.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink | h5py.ExternalLink):
            if _link_target(link) != _link_target(dst.get(name, getlink=True)):
                raise VerifyFailed(f"{dst.name}/{name}: link differs from the source's")
            continue
        old, new = src[name], dst[name]
        if type(old) is not type(new):
            raise VerifyFailed(f"{new.name}: not the same kind of object as the source's")
        if isinstance(old, h5py.Group):
            verify_group(old, new)
        elif isinstance(old, h5py.Dataset):
            _verify_dataset(old, new)


def _link_target(link: Any) -> tuple[type, str | None, str | None]:
    return type(link), getattr(link, "path", None), getattr(link, "filename", None)


def _verify_dataset(src: h5py.Dataset, dst: h5py.Dataset) -> None:
    _verify_attrs(src, dst)
    shape, tid = src.shape, src.id.get_type()
    if shape != dst.shape or not tid.equal(dst.id.get_type()):
        raise VerifyFailed(f"{dst.name}: shape or type differs from the source's")
    if shape is None or not math.prod(shape):
        return
    slab = dst.chunks or chunk_shape(shape, tid.get_size())
    whole = slab == shape  # one read of all of it: h5py's quicker path
    for _offset, sel in [((), ())] if whole else grid(shape, slab):
        if not same_values(src[sel], dst[sel]):
            raise VerifyFailed(f"{dst.name}: values differ from the source's")


def _verify_attrs(src: h5py.HLObject, dst: h5py.HLObject) -> None:
    if sorted(src.attrs) != sorted(dst.attrs):
        raise VerifyFailed(f"{dst.name}: attribute names differ from the source's")
    for name in src.attrs:
        old, new = h5a.open(src.id, name.encode()), h5a.open(dst.id, name.encode())
        same_type = old.get_type().equal(new.get_type()) and old.shape == new.shape
        if not same_type or not same_values(src.attrs[name], dst.attrs[name]):
            raise VerifyFailed(f"{dst.name}: attribute {name!r} differs from the source's")


def same_values(a: Any, b: Any) -> bool:
    """Equal bit for bit for numbers (so NaN == NaN, -0.0 != 0.0), by value otherwise."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "biufc":  # compare the bits, as unsigned integers of the same width
        size = a.dtype.itemsize
        bits = np.dtype(f"u{size}") if size in (1, 2, 4, 8) else np.dtype(np.uint8)
        return bool(np.array_equal(a.reshape(-1).view(bits), b.reshape(-1).view(bits)))
    return bool(np.array_equal(a, b))
