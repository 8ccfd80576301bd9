"""The chunk codecs of `transforms.compress`: which codec, level and shuffle a rewrite uses
(`ChunkCodec`, the filter pipeline it declares), the encoders that compress a chunk on a pool
thread outside the GIL, and the pipe that writes encoded chunks back on the HDF5 thread.

Encoders: gzip `zlib.compress` (HDF5's deflate filter stores a plain zlib stream); lzf
`lzf_compress` exported by h5py's h5z extension (its lzf filter's own encoder); zstd
`ZSTD_compress` exported by hdf5plugin's zstd plugin. One that cannot be loaded leaves its codec
to HDF5's own filter (`encoder` None: an ordinary write, one core)."""

from __future__ import annotations

import ctypes
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from h5py import h5p, h5z

from ..core.errors import UsageError

CODECS = ("gzip", "lzf", "zstd")
ZSTD_FILTER = 32015  # hdf5plugin.Zstd's registered HDF5 filter id
_LEVELS = {"gzip": (4, range(10)), "zstd": (3, range(1, 23))}

Encoder = Callable[[np.ndarray], Any]  # raw bytes -> compressed buffer (None: did not shrink)


@dataclass(frozen=True)
class ChunkCodec:
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


def chunk_codec(codec: str, level: int | None, shuffle: bool) -> ChunkCodec:
    """The codec of a rewrite; an unknown codec or a level it does not have is a usage error."""
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
    return ChunkCodec(codec, level, shuffle, _encoder(codec, level or 0))


def _register_zstd() -> None:
    try:
        import hdf5plugin  # noqa: F401  registers the zstd filter with HDF5 (and for verifying)
    except ImportError:
        raise UsageError("zstd needs the hdf5plugin package (pip install hdf5plugin)") from None
    if not h5z.filter_avail(ZSTD_FILTER):
        raise UsageError("hdf5plugin did not register its zstd filter")


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


class ChunkPipe:
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
