"""The unpacking half of `fsops` for object storage: a checkpoint of several files, streamed
back from the store as one tar (`core.ustar`), becomes files only once every one is whole and
their hash is the catalog's.

The stream is read block by block (one 512-byte header at a time, data in the chunks it comes
in: memory bounded by a chunk) into our temp folder in the destination folder (a crash leaves a
temp the next start removes). Only regular files and folders are unpacked, each created new
(`O_EXCL`, `O_NOFOLLOW`, beneath descriptors of folders we made), under exactly the names the
catalog recorded, in its order, each once; a link, a device, an absolute or `..` name, a
duplicate, an unknown name, more bytes than were indexed, more than a record's zeros after the
end: refused, the temp removed, nothing published. The members are hashed as they are
written, as the indexer hashed them (`fs.hashing.hash_files`); then fsynced, given the indexed
mtime, and each top entry renamed into place with `renameat2(NOREPLACE)`: a name that exists
(a file, or a folder where the archive has a file) is never replaced, and a folder that exists
is entered, its missing members put in. A refusal mid-way moves what was published back out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path

from ..core import ustar
from ..core.errors import BadArchive, HashMismatch, WouldReplace
from .fsfetch import plain_folder
from .fsops import folder_beneath, opened, relative_parts, remove_own_temp, temp_name
from .fsswap import move_new
from .hashing import StreamHash, member_prefix

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_RECORD = 10240  # zeros a tar writer may pad its archive with after the end, at most


class _Blocks:
    """Exactly `n` bytes at a time from the chunks (a header: 512), or the data of a member in
    pieces of at most one chunk; at most one chunk held."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = memoryview(b"")

    def _fill(self) -> bool:
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            self._buf = memoryview(chunk)
        return True

    def exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and self._fill():
            take = self._buf[: n - len(out)]
            out += take
            self._buf = self._buf[len(take) :]
        return bytes(out)

    def pieces(self, n: int) -> Iterator[memoryview]:
        left = n
        while left:
            if not self._fill():
                raise BadArchive("the archive ends inside a member's data")
            take = self._buf[:left]
            self._buf = self._buf[len(take) :]
            left -= len(take)
            yield take

    def rest_is_zeros(self, limit: int) -> bool:
        """Whether what is left is at most `limit` zero bytes (a tar writer's record padding)."""
        while self._fill():
            limit -= len(self._buf)
            if limit < 0 or any(self._buf):
                return False
            self._buf = memoryview(b"")
        return True


_PIECE = 1 << 20  # the bytes compared at a time


def receive_tree(
    folder: Path,
    names: Sequence[str],
    chunks: Iterable[bytes],
    *,
    expected_hash: str,
    expected_bytes: int,
    root: Path | None = None,
    mtime_ns: int | None = None,
) -> list[Path]:
    """Unpack the tar `chunks` of the files `names` (relative to `folder`, the catalog's order)
    into `folder` (beneath `root` when given: reached without following a symlink). Returns
    the paths published."""
    if not names:
        raise BadArchive(f"{folder}: no member files recorded: nothing to unpack")
    destination: AbstractContextManager[int]
    if root is not None:  # the root itself, or a folder below it
        same = os.path.normpath(folder) == os.path.normpath(root)
        destination = folder_beneath(root, () if same else relative_parts(root, folder))
    else:
        destination = plain_folder(folder)
    temp = temp_name(folder / names[0].split("/")[0], os.urandom(4).hex()).name
    with destination as fd:
        for name in names:  # before a byte is fetched (the renames check again)
            _refuse_early(folder / name)
        os.mkdir(temp, 0o700, dir_fd=fd)
        try:
            with opened(os.open(temp, _DIR, dir_fd=fd)) as tfd:
                _unpack(tfd, names, _Blocks(chunks), expected_hash, expected_bytes, folder)
                _set_times(tfd, mtime_ns)
                published = _publish(tfd, fd, folder)
            os.fsync(fd)
            return published
        finally:
            remove_own_temp(fd, temp)


def _unpack(
    tfd: int, names: Sequence[str], blocks: _Blocks, expected: str, budget: int, folder: Path
) -> None:
    digest, seen, index, several = StreamHash(), set[str](), 0, len(names) > 1
    folders = {"/".join(n.split("/")[:d]) for n in names for d in range(1, n.count("/") + 1)}
    while (entry := ustar.parse(blocks.exactly(ustar.BLOCK))) is not None:
        if entry.name in seen:
            raise BadArchive(f"{entry.name}: twice in the archive")
        seen.add(entry.name)
        if entry.kind is ustar.Kind.FOLDER:
            if entry.name not in folders:
                raise BadArchive(f"{entry.name}/: a folder the checkpoint does not have")
            os.close(_mkdirs(tfd, entry.name.split("/")))
            continue
        if index >= len(names) or entry.name != names[index]:
            raise BadArchive(f"{entry.name}: not the checkpoint's next file (the catalog's order)")
        if entry.size > budget:
            raise BadArchive(f"{entry.name}: more bytes than the checkpoint has")
        budget -= entry.size
        index += 1
        parts = entry.name.split("/")
        if several:
            digest.update(member_prefix(parts[-1], entry.size))
        with opened(_mkdirs(tfd, parts[:-1])) as dfd:
            out = os.open(parts[-1], _NEW, 0o644, dir_fd=dfd)
            with opened(out), os.fdopen(out, "wb", closefd=False) as sink:
                for piece in blocks.pieces(entry.size):
                    digest.update(piece)
                    sink.write(piece)
                sink.flush()
                os.fsync(out)
        for _ in blocks.pieces(ustar.padding(entry.size)):
            pass
    if blocks.exactly(ustar.BLOCK) != bytes(ustar.BLOCK) or not blocks.rest_is_zeros(_RECORD):
        raise BadArchive("bytes after the archive's end")
    if index != len(names):
        raise BadArchive(f"{len(names) - index} of the checkpoint's files missing in the archive")
    if digest.value() != expected:
        raise HashMismatch(
            f"{folder}: the files fetched hash to {digest.value()}, the catalog has {expected}:"
            " nothing published"
        )


def _mkdirs(tfd: int, parts: Sequence[str]) -> int:
    """A descriptor of `parts` below `tfd`, each made (ours, 0755) when missing, none a link."""
    fd = os.dup(tfd)
    for part in parts:
        with suppress(FileExistsError):
            os.mkdir(part, ustar.FOLDER_MODE, dir_fd=fd)
        try:
            child = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _set_times(tfd: int, mtime_ns: int | None) -> None:
    """Every file and folder unpacked gets the indexed mtime (files first, then folders from
    the deepest), each fsynced."""
    for _path, _dirs, files, dfd in os.fwalk(".", topdown=False, dir_fd=tfd):
        for name in files:
            if mtime_ns is not None:
                os.utime(name, ns=(mtime_ns, mtime_ns), dir_fd=dfd, follow_symlinks=False)
        if mtime_ns is not None:
            os.utime(dfd, ns=(mtime_ns, mtime_ns))
        os.fsync(dfd)


def _publish(tfd: int, fd: int, folder: Path) -> list[Path]:
    """Each entry of the temp folder renamed into `fd` without replacing anything; a folder
    that exists is entered. On a refusal, what was moved is moved back, then it raises."""
    done: list[tuple[int, int, str, Path]] = []  # (from fd, to fd, name, path), to undo
    held: list[int] = []
    try:
        _merge(tfd, fd, folder, done, held)
        return [path for _src, _dst, _name, path in done]
    except BaseException:
        for src, dst, name, _path in reversed(done):
            move_new(dst, name, src, name)
        raise
    finally:
        for h in held:
            os.close(h)


def _merge(
    src: int, dst: int, where: Path, done: list[tuple[int, int, str, Path]], held: list[int]
) -> None:
    for name in sorted(os.listdir(src)):
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
        try:
            there = os.stat(name, dir_fd=dst, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None and stat.S_ISDIR(info.st_mode) and stat.S_ISDIR(there.st_mode):
            held.append(os.open(name, _DIR, dir_fd=src))
            held.append(os.open(name, _DIR, dir_fd=dst))
            _merge(held[-2], held[-1], where / name, done, held)
            continue
        if there is not None and _same_file_bytes(src, dst, name, info, there):
            continue  # published by a fetch killed before its last rename: kept as it is
        if there is not None or not move_new(src, name, dst, name):
            raise WouldReplace(f"{where / name} exists: never replaced (move it away)")
        done.append((src, dst, name, where / name))


def _refuse_early(path: Path) -> None:
    """Refuse before fetching a byte when `path` is something that can never be a member's
    verified bytes. A regular file there may be one a killed fetch published before its last
    rename: the publish compares it with the verified member and keeps it only if identical."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise WouldReplace(f"{path} exists: never replaced (move it away)")


def _same_file_bytes(
    src: int, dst: int, name: str, info: os.stat_result, there: os.stat_result
) -> bool:
    """Whether the regular file `name` in `dst` holds exactly the bytes of the verified one in
    `src` (read without following a link, in bounded pieces)."""
    if not (stat.S_ISREG(info.st_mode) and stat.S_ISREG(there.st_mode)):
        return False
    if info.st_size != there.st_size:
        return False
    # Non-blocking: a FIFO swapped in after the stat must not hang the open; checked again.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    with (
        opened(os.open(name, flags, dir_fd=src)) as a,
        opened(os.open(name, flags, dir_fd=dst)) as b,
    ):
        if not stat.S_ISREG(os.fstat(b).st_mode):
            return False
        while True:
            left, right = os.read(a, _PIECE), os.read(b, _PIECE)
            if left != right:
                return False
            if not left:
                return True
