"""Recompress an HDF5 checkpoint in place: every dataset with byte-shuffle + gzip, lzf or zstd.

h5py runs every HDF5 call under one lock, so HDF5's own filters would use one core. Our threads
encode the chunks instead (the encoders release the GIL) and the main thread stores them with
HDF5's direct chunk write into datasets declaring the same filter pipeline, which any HDF5
reader then decodes as usual. Encoders (all direct + threaded): gzip `zlib.compress` (HDF5's
deflate filter stores a plain zlib stream); lzf `lzf_compress` exported by h5py's h5z extension
(its lzf filter's own encoder); zstd `ZSTD_compress` exported by hdf5plugin's zstd plugin. If
one cannot be loaded, that codec falls back to h5py's ordinary write (HDF5 filters, one core).
Scalars and datasets under 1 KiB stay contiguous and raw; datasets that are not plain numbers
are copied as stored (H5Ocopy); groups, links and attributes exactly, attribute types included.
Memory: one ~4 MiB slab per chunk, at most 2 x workers in flight. Every dataset is read back
through HDF5 and compared with the source before `fsops.rewrite` swaps the file in.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import IO, Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5o, h5p, h5s, h5t, h5z

from ..core.errors import Changed, NotFound, UsageError, VerifyFailed
from ..core.model import FileStat, Format
from ..formats import hdf5, window
from ..formats.detect import ZIP_MAGIC, read_checkpoint, refuse_outside_references
from ..fs import fsops
from ..fs.hashing import hash_files
from . import bounds

CODECS = ("gzip", "lzf", "zstd")
SLAB_BYTES = 4 << 20  # chunk size: big chunks compress better than small ones
TINY_BYTES = 1024  # below this a chunk index and filter headers cost more than they save
KERAS_MEMBER = "model.weights.h5"
ZSTD_FILTER = 32015  # hdf5plugin.Zstd's registered HDF5 filter id
_LEVELS = {"gzip": (4, range(10)), "zstd": (3, range(1, 23))}
_COPY_BUFFER = 1 << 20

Encoder = Callable[[np.ndarray], Any]  # raw bytes -> compressed buffer (None: did not shrink)


@dataclass(frozen=True)
class CompressResult:
    path: Path
    codec: str  # e.g. "gzip-4+shuffle", "zstd-3+shuffle", "lzf+shuffle"
    bytes_before: int
    bytes_after: int
    hash: str  # fs.hashing.hash_files([path]) of the new file
    datasets: int
    needs: str | None  # "import hdf5plugin" for zstd (readers need it), else None
    skipped: str | None = None  # why the file was left as it was (it would not shrink)


@dataclass(frozen=True)
class _Spec:
    codec: str
    level: int | None
    shuffle: bool
    encoder: Encoder | None  # None: HDF5 runs the filter (ordinary write, one core)

    @property
    def label(self) -> str:
        name = self.codec if self.level is None else f"{self.codec}-{self.level}"
        return name + ("+shuffle" if self.shuffle else "")

    def dcpl(self, chunk: tuple[int, ...]) -> h5p.PropDCID:
        plist = h5p.create(h5p.DATASET_CREATE)
        plist.set_chunk(chunk)
        if self.shuffle:
            plist.set_shuffle()
        if self.codec == "gzip":
            plist.set_deflate(self.level)
        elif self.codec == "lzf":
            plist.set_filter(h5z.FILTER_LZF, h5z.FLAG_OPTIONAL)
        else:  # what hdf5plugin.Zstd(clevel=N) declares through h5py
            plist.set_filter(ZSTD_FILTER, h5z.FLAG_OPTIONAL, (self.level,))
        return plist

    def encode(self, chunk: np.ndarray) -> tuple[Any, int]:
        """(bytes for the direct chunk write, filter mask) of one full chunk."""
        assert self.encoder is not None
        data = shuffled(chunk) if self.shuffle else chunk.reshape(-1).view(np.uint8)
        out = self.encoder(data)
        if out is None:  # lzf could not shrink it: HDF5 skips an optional filter, and so do we
            return data, 1 << (1 if self.shuffle else 0)
        return out, 0


def compress(
    root: Path,
    source: Path,
    *,
    codec: str = "gzip",
    level: int | None = None,
    shuffle: bool = True,
    workers: int | None = None,
    indexed: FileStat | None = None,
) -> CompressResult:
    """Rewrite `source` (below `root`) in place with `codec` + shuffle; verified before the swap.
    A result that would not be smaller is thrown away and the file left as it is (`skipped`).

    Which file `source` is (inode, size, mtime, ctime) is taken before its first byte is read,
    and is what the swap requires it still to be: a save landing after that is refused, not
    replaced (`fsswap` says which window remains). `indexed`: the stat the caller decided on
    (the catalog's); a file that is not that one anymore at that first look is refused unread.
    A read that fails on a file that changed under it is refused as changed (exit 3), not
    reported as a corrupt file or an unexpected error."""
    spec = _spec(codec, level, shuffle)
    first = _first_look(root, source, indexed)
    workers = max(1, workers or len(os.sched_getaffinity(0)))
    try:
        with _refused_if_changed(root, source, first):
            fmt = _hdf5_format(source)
            refuse_outside_references(source)  # a rewrite would copy bytes from outside the root
            rewrite_file = _rewrite_keras if fmt is Format.KERAS_ZIP else _rewrite_h5
            with (
                ThreadPoolExecutor(workers, "compress") as pool,
                fsops.rewrite(root, source, replacing=first) as temp,
            ):
                datasets, digest = rewrite_file(source, temp, spec, _Pipe(pool, 2 * workers))
                _check_unchanged(root, source, first)
                after = temp.stat().st_size
                if after >= first.size:
                    raise _NotSmaller(after)
    except _NotSmaller as not_smaller:
        skipped = f"would not shrink: {first.size} -> {not_smaller.size} bytes"
        digest = hash_files([source])
        _check_unchanged(root, source, first)  # the hash is of the file that was read
        return CompressResult(
            source, spec.label, first.size, first.size, digest, datasets, None, skipped
        )
    needs = "import hdf5plugin" if codec == "zstd" else None
    return CompressResult(source, spec.label, first.size, after, digest, datasets, needs)


def _first_look(root: Path, source: Path, indexed: FileStat | None) -> fsops.Identity:
    """Which file `source` is, before anything reads it; refused if not the one `indexed`."""
    first = fsops.identity(root, source)
    if first is None or not source.is_file():
        _hdf5_format(source)  # says what is there instead: nothing, a folder, a TF checkpoint
        raise NotFound(f"{source}: no such file")
    if indexed is not None and FileStat(first.size, first.mtime_ns, first.inode) != indexed:
        raise fsops.Refused(
            f"{source} changed since it was checked against the catalog: skipped; the next "
            "scan re-indexes it"
        )
    return first


@contextmanager
def _refused_if_changed(root: Path, source: Path, first: fsops.Identity) -> Iterator[None]:
    """A read that fails because a save truncates and writes the file under it (h5py then
    raises anything: KeyError, RuntimeError, OSError; our readers call it corrupt) is that
    change: refused, one line, exit 3. On an unchanged file the error stays what it is."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, fsops.Refused | Changed) or _is_unchanged(root, source, first):
            raise
        raise fsops.Refused(f"{source} changed while being compressed") from exc


def _is_unchanged(root: Path, source: Path, first: fsops.Identity) -> bool:
    try:
        return first.same_file(fsops.identity(root, source))
    except OSError:
        return False


class _NotSmaller(Exception):
    """Leaves the rewrite block without renaming: the compressed file is not smaller."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _spec(codec: str, level: int | None, shuffle: bool) -> _Spec:
    if codec not in CODECS:
        raise UsageError(f"unknown codec {codec!r}: choose one of {', '.join(CODECS)}")
    if codec == "lzf":
        if level is not None:
            raise UsageError("lzf has no compression level")
    else:
        default, allowed = _LEVELS[codec]
        level = default if level is None else level
        if level not in allowed:
            raise UsageError(f"{codec} level must be {allowed.start}..{allowed.stop - 1}")
    if codec == "zstd":
        _register_zstd()
    return _Spec(codec, level, shuffle, _encoder(codec, level or 0))


def _register_zstd() -> None:
    try:
        import hdf5plugin  # noqa: F401  registers the zstd filter with HDF5 (and for verifying)
    except ImportError:
        raise UsageError("zstd needs the hdf5plugin package (pip install hdf5plugin)") from None
    if not h5z.filter_avail(ZSTD_FILTER):
        raise UsageError("hdf5plugin did not register its zstd filter")


def _hdf5_format(source: Path) -> Format:
    """The checkpoint's format, by content; anything but Keras HDF5 / .keras is a usage error."""
    only = "only Keras HDF5 files and .keras archives can be compressed"
    if not source.is_file():
        if not source.exists() and not source.with_name(source.name + ".index").exists():
            raise NotFound(f"{source}: no such file")
        raise UsageError(f"{source} is a SavedModel folder or a TF checkpoint, not HDF5: {only}")
    with open(source, "rb") as f:
        head = f.read(65536 + 8)
    if hdf5.find_superblock(head) is None and head[:4] not in ZIP_MAGIC:
        raise UsageError(f"{source} is not HDF5 nor a .keras archive (a TF checkpoint?): {only}")
    bounds.check_file(source)  # before any reader walks a hostile file
    return read_checkpoint(source).format


def _check_unchanged(root: Path, source: Path, first: fsops.Identity) -> None:
    if not _is_unchanged(root, source, first):
        raise fsops.Refused(f"{source} changed while being compressed")


# ---- encoders: run on the pool threads, outside the GIL ----


def shuffled(chunk: np.ndarray) -> np.ndarray:
    """HDF5's shuffle filter layout: byte 0 of every element, then byte 1, and so on."""
    raw = chunk.reshape(-1).view(np.uint8)
    size = chunk.dtype.itemsize
    return np.ascontiguousarray(raw.reshape(-1, size).T) if size > 1 else raw


def _encoder(codec: str, level: int) -> Encoder | None:
    try:
        if codec == "gzip":
            return partial(zlib.compress, level=level)
        if codec == "zstd":
            return partial(_zstd_compress, _zstd_library(), level)
        return partial(_lzf_compress, _lzf_function())
    except (OSError, AttributeError):  # library or symbol not there: HDF5 encodes instead
        return None


@cache
def _zstd_library() -> ctypes.CDLL:
    import hdf5plugin

    lib = ctypes.CDLL(str(Path(hdf5plugin.PLUGIN_PATH) / "libh5zstd.so"))
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    lib.ZSTD_compress.restype = ctypes.c_size_t
    size_t, pointer = ctypes.c_size_t, ctypes.c_void_p
    lib.ZSTD_compress.argtypes = [pointer, size_t, pointer, size_t, ctypes.c_int]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


def _zstd_compress(lib: ctypes.CDLL, level: int, data: np.ndarray) -> np.ndarray:
    # One frame with its content size: what the plugin's decoder expects (ZSTD_compress writes it).
    out = np.empty(lib.ZSTD_compressBound(data.nbytes), np.uint8)
    n = lib.ZSTD_compress(out.ctypes.data, out.nbytes, data.ctypes.data, data.nbytes, level)
    if lib.ZSTD_isError(n):
        raise RuntimeError(f"ZSTD_compress failed on {data.nbytes} bytes")
    return out[:n]


@cache
def _lzf_function() -> Any:
    fn = ctypes.CDLL(h5z.__file__).lzf_compress
    fn.restype = ctypes.c_uint
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint]
    return fn


def _lzf_compress(fn: Any, data: np.ndarray) -> np.ndarray | None:
    # Like h5py's filter: an output buffer as long as the input, 0 = "does not shrink".
    out = np.empty(data.nbytes, np.uint8)
    n = fn(data.ctypes.data, data.nbytes, out.ctypes.data, out.nbytes)
    return out[:n] if n else None


class _Pipe:
    """Chunks encode on the pool while this thread reads and writes HDF5 (h5py is one lock).
    At most `depth` chunks in flight; each is written as soon as it is done, in any order (a
    chunk's place is its offset), so one slow chunk does not idle the other workers."""

    def __init__(self, pool: ThreadPoolExecutor, depth: int) -> None:
        self.pool, self._depth = pool, depth
        self._pending: dict[Future[tuple[Any, int]], tuple[h5py.Dataset, tuple[int, ...]]] = {}

    def put(self, dset: h5py.Dataset, offset: tuple[int, ...], job: Callable[[], Any]) -> None:
        self._pending[self.pool.submit(job)] = (dset, offset)
        if len(self._pending) >= self._depth:
            self._write(wait(self._pending, return_when=FIRST_COMPLETED).done)

    def drain(self) -> None:
        self._write(wait(self._pending).done)

    def _write(self, done: set[Future[tuple[Any, int]]]) -> None:
        for future in done:
            dset, offset = self._pending.pop(future)
            data, mask = future.result()
            dset.id.write_direct_chunk(offset, data, filter_mask=mask)


# ---- copying the tree ----


def _rewrite_h5(source: Path, temp: Path, spec: _Spec, pipe: _Pipe) -> tuple[int, str]:
    with hdf5.open_h5(str(source)) as src:
        with h5py.File(temp, "w", locking=False, track_order=_tracks_order(src)) as dst:
            count = _copy_all(src, dst, spec, pipe)
        digest = pipe.pool.submit(hash_files, [temp])  # hashed while we verify
        with hdf5.open_h5(str(temp)) as dst:
            _verify_group(src, dst)
    return count, digest.result()


def _copy_all(src: h5py.Group, dst: h5py.Group, spec: _Spec, pipe: _Pipe) -> int:
    count = _copy_group(src, dst, spec, pipe)
    pipe.drain()  # before the file closes
    return count


def _copy_group(src: h5py.Group, dst: h5py.Group, spec: _Spec, pipe: _Pipe) -> int:
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
            child = dst.create_group(name, track_order=_tracks_order(obj))
            count += _copy_group(obj, child, spec, pipe)
        elif plan == "copy" or plan is None:  # strings, compounds, references, empty spaces,
            h5o.copy(src.id, name.encode(), dst.id, name.encode())  # named types: as stored
            count += plan is not None
        else:
            _copy_dataset(obj, plan == "chunked", dst, name, spec, pipe)
            count += 1
    return count


def _tracks_order(group: h5py.Group) -> bool:
    return bool(group.id.get_create_plist().get_link_creation_order())


def _plan(dset: h5py.Dataset) -> str:
    tid, shape = dset.id.get_type(), dset.shape
    plain = tid.get_class() in (h5t.INTEGER, h5t.FLOAT) and dset.dtype.itemsize == tid.get_size()
    if shape is None or not plain:
        return "copy"
    return "chunked" if shape and math.prod(shape) * tid.get_size() >= TINY_BYTES else "contiguous"


def _copy_dataset(
    src: h5py.Dataset, chunked: bool, group: h5py.Group, name: str, spec: _Spec, pipe: _Pipe
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


# ---- .keras: rewrite the weights member, re-zip with every member stored ----


def _rewrite_keras(source: Path, temp: Path, spec: _Spec, pipe: _Pipe) -> tuple[int, str]:
    with (
        open(source, "rb") as raw,
        zipfile.ZipFile(raw) as archive,
        window.open_member(archive, raw, KERAS_MEMBER) as member,
        hdf5.open_h5(member) as src,
    ):
        # A nameless file (O_TMPFILE) beside the target: same filesystem, gone after a crash.
        with tempfile.TemporaryFile(dir=temp.parent, prefix=fsops.TEMP_PREFIX) as inner:
            with h5py.File(inner, "w", track_order=_tracks_order(src)) as dst:
                count = _copy_all(src, dst, spec, pipe)
            _write_archive(archive, inner, temp)
        digest = pipe.pool.submit(hash_files, [temp])  # hashed and CRC-checked while we verify
        crc = pipe.pool.submit(_crc_problem, temp)
        _verify_archive(archive, src, temp)
        if problem := crc.result():
            raise VerifyFailed(f"{temp.name}: zip member {problem} fails its CRC")
    return count, digest.result()


def _write_archive(archive: zipfile.ZipFile, inner: IO[bytes], temp: Path) -> None:
    with zipfile.ZipFile(temp, "w", zipfile.ZIP_STORED, allowZip64=True) as out:
        out.comment = archive.comment
        for info in archive.infolist():
            stored = zipfile.ZipInfo(info.filename, info.date_time)
            stored.external_attr, stored.create_system = info.external_attr, info.create_system
            stored.comment = info.comment
            if info.filename == KERAS_MEMBER:
                stored.file_size = inner.seek(0, os.SEEK_END)  # lets zipfile pick zip64
                inner.seek(0)
                with out.open(stored, "w") as w:
                    shutil.copyfileobj(inner, w, _COPY_BUFFER)
            else:
                stored.file_size = info.file_size
                with archive.open(info) as r, out.open(stored, "w") as w:
                    shutil.copyfileobj(r, w, _COPY_BUFFER)


def _crc_problem(path: Path) -> str | None:
    with zipfile.ZipFile(path) as archive:
        return archive.testzip()


def _verify_archive(archive: zipfile.ZipFile, src: h5py.File, temp: Path) -> None:
    with open(temp, "rb") as raw, zipfile.ZipFile(raw) as new:
        if [i.filename for i in new.infolist()] != [i.filename for i in archive.infolist()]:
            raise VerifyFailed(f"{temp.name}: the members differ from the source's")
        if any(i.compress_type != zipfile.ZIP_STORED for i in new.infolist()):
            raise VerifyFailed(f"{temp.name}: a member is not stored")
        for old in archive.infolist():  # copied bytes: same CRC (checked by testzip) and size
            copy = new.getinfo(old.filename)
            if old.filename != KERAS_MEMBER and (old.CRC, old.file_size) != (
                copy.CRC,
                copy.file_size,
            ):
                raise VerifyFailed(f"{temp.name}: member {old.filename} differs")
        with window.open_member(new, raw, KERAS_MEMBER) as member, hdf5.open_h5(member) as dst:
            _verify_group(src, dst)


# ---- verification: everything reads back through HDF5 as the source ----


def _verify_group(src: h5py.Group, dst: h5py.Group) -> None:
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
            _verify_group(old, new)
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
