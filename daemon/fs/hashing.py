"""Content hashes: BLAKE3, streamed in fixed-size chunks (bounded memory, all cores)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import blake3

from . import beneath

ALGORITHM = "blake3"
CHUNK = 8 << 20  # large enough for BLAKE3 to spread one chunk over several threads
THREADED_FROM = 16 << 20


def hash_files(paths: Sequence[Path], root: Path | None = None) -> str:
    """`blake3:<hex>` of one file's bytes; for several files, of each name, length and bytes.

    Each file is opened as `fs.beneath` does (regular files only, no symlink followed;
    beneath `root` when given), so a FIFO or a link swapped in is refused, never read. One
    file is open at a time, so a folder of thousands of files (a DCP save of many ranks) stays
    under any limit on open files.
    """
    total = 0
    for path in paths:
        fd = beneath.open_regular(path, root)
        try:
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    # Threads only pay off on large inputs; small files would just start idle threads.
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO if total >= THREADED_FROM else 1)
    view = memoryview(bytearray(CHUNK))
    for path in paths:
        with os.fdopen(beneath.open_regular(path, root), "rb", buffering=0) as f:
            if len(paths) > 1:
                size = f.seek(0, 2)
                f.seek(0)
                hasher.update(member_prefix(path.name, size))
            while n := f.readinto(view):
                hasher.update(view[:n])
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def hash_each_and_all(paths: Sequence[Path], root: Path | None = None) -> tuple[list[str], str]:
    """Each file's `hash_files([path])` and `hash_files(paths)` of them all, from one read of
    each file (a verified copy checked file by file and recorded as a whole)."""
    each = []
    mode = blake3.blake3.AUTO
    whole = blake3.blake3(max_threads=mode)
    view = memoryview(bytearray(CHUNK))
    for path in paths:
        with os.fdopen(beneath.open_regular(path, root), "rb", buffering=0) as f:
            size = f.seek(0, 2)
            f.seek(0)
            one = blake3.blake3(max_threads=mode if size >= THREADED_FROM else 1)
            if len(paths) > 1:
                whole.update(member_prefix(path.name, size))
            while n := f.readinto(view):
                one.update(view[:n])
                whole.update(view[:n])
        each.append(f"{ALGORITHM}:{one.hexdigest()}")
    return each, f"{ALGORITHM}:{whole.hexdigest()}"


def hash_artifact(path: Path, root: Path | None = None) -> str:
    """An artifact's hash: a file's `hash_files`; a folder's (a Hugging Face inference folder)
    that of every regular file in it, sorted (no link followed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        from .folder_layouts import tree_files

        return hash_files(sorted(tree_files(path)), root)
    return hash_files([path], root)


def artifact_bytes(path: Path) -> int:
    """An artifact's size: a file's, or the sum of a folder's regular files."""
    if os.path.isdir(path) and not os.path.islink(path):
        from .folder_layouts import tree_files

        return sum(os.lstat(p).st_size for p in tree_files(path))
    return os.lstat(path).st_size


def member_prefix(name: str, size: int) -> bytes:
    """What `hash_files` of several files hashes before each file's bytes: its name (the last
    part only) and its length. A stream of members (a tar tiered or fetched) feeds a
    `StreamHash` this, then the bytes, to get the catalog's hash in the same pass."""
    return f"{name}\0{size}\0".encode()


class StreamHash:
    """The `hash_files` value of one file's bytes, fed as they stream (an upload, a fetch), so
    what is checked is what went over the wire, not a later read."""

    def __init__(self) -> None:
        self._hasher = blake3.blake3(max_threads=1)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._hasher.update(data)

    def value(self) -> str:
        return f"{ALGORITHM}:{self._hasher.hexdigest()}"
