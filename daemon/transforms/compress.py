"""Recompress an HDF5 checkpoint in place: every dataset with byte-shuffle + gzip, lzf or zstd.

h5py runs every HDF5 call under one lock, so HDF5's own filters would use one core. Our threads
encode the chunks instead (the encoders release the GIL) and the main thread stores them with
HDF5's direct chunk write into datasets declaring the same filter pipeline, which any HDF5
reader then decodes as usual (an encoder that cannot be loaded leaves its codec to h5py's
ordinary write: HDF5's filter, one core). Memory: one ~4 MiB slab per chunk, at most 2 x workers
in flight. Every dataset is read back through HDF5 and compared with the source before
`fsops.rewrite` swaps the file in.

This module holds the rewrite itself (the file's identity, the .keras re-zip, the swap); the
codecs, encoders and chunk pipe are `transforms.chunk_codecs`', the tree copy
`transforms.h5_copy`'s, the read-back check `transforms.h5_verify`'s, the zip writer
`transforms.split.rezip`.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import h5py

from ..core.errors import Changed, NotFound, UsageError, VerifyFailed
from ..core.model import FileStat, Format
from ..formats import hdf5, window
from ..formats.detect import read_checkpoint, refuse_outside_references
from ..formats.file_detect import ZIP_MAGIC
from ..fs import fsops, temp_names
from ..fs.hashing import hash_files
from . import bounds
from .chunk_codecs import ChunkCodec, ChunkPipe, chunk_codec
from .h5_copy import copy_all, tracks_order
from .h5_verify import verify_group
from .split import rezip

KERAS_MEMBER = "model.weights.h5"


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
    spec = chunk_codec(codec, level, shuffle)
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
                datasets, digest = rewrite_file(source, temp, spec, ChunkPipe(pool, 2 * workers))
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


def _rewrite_h5(source: Path, temp: Path, spec: ChunkCodec, pipe: ChunkPipe) -> tuple[int, str]:
    with hdf5.open_h5(str(source)) as src:
        with h5py.File(temp, "w", locking=False, track_order=tracks_order(src)) as dst:
            count = copy_all(src, dst, spec, pipe)
        digest = pipe.pool.submit(hash_files, [temp])  # hashed while we verify
        with hdf5.open_h5(str(temp)) as dst:
            verify_group(src, dst)
    return count, digest.result()


# ---- .keras: rewrite the weights member, re-zip with every member stored ----


def _rewrite_keras(source: Path, temp: Path, spec: ChunkCodec, pipe: ChunkPipe) -> tuple[int, str]:
    with (
        open(source, "rb") as raw,
        zipfile.ZipFile(raw) as archive,
        window.open_member(archive, raw, KERAS_MEMBER) as member,
        hdf5.open_h5(member) as src,
    ):
        # A nameless file (O_TMPFILE) beside the target: same filesystem, gone after a crash.
        with tempfile.TemporaryFile(dir=temp.parent, prefix=temp_names.TEMP_PREFIX) as inner:
            with h5py.File(inner, "w", track_order=tracks_order(src)) as dst:
                count = copy_all(src, dst, spec, pipe)
            rezip(temp, archive, {KERAS_MEMBER: inner}, archive.comment)
        digest = pipe.pool.submit(hash_files, [temp])  # hashed and CRC-checked while we verify
        crc = pipe.pool.submit(_crc_problem, temp)
        _verify_archive(archive, src, temp)
        if problem := crc.result():
            raise VerifyFailed(f"{temp.name}: zip member {problem} fails its CRC")
    return count, digest.result()


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
            same = (old.CRC, old.file_size) == (copy.CRC, copy.file_size)
            if old.filename != KERAS_MEMBER and not same:
                raise VerifyFailed(f"{temp.name}: member {old.filename} differs")
        with window.open_member(new, raw, KERAS_MEMBER) as member, hdf5.open_h5(member) as dst:
            verify_group(src, dst)
