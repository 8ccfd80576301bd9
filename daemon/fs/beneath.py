"""Open files under a root for reading, the way a hostile tree cannot exploit.

Every file under a root is untrusted until read safely: a name may be a symlink out of the root
(or be swapped for one between discovery and the open), a parent folder may be a symlink, and a
FIFO or a device named `x.h5` would block (or worse) on open. So a file is reached by walking
directory descriptors from its root with O_NOFOLLOW (`fsops.folder_beneath`), opened with
O_NOFOLLOW | O_NONBLOCK (a FIFO's open returns at once instead of waiting for a writer), and
used only if `fstat` says it is a regular file. Reading only: nothing here changes a file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..core.errors import NotARegularFile
from .fsops import folder_beneath, relative_parts

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def open_regular(path: Path, root: Path | None = None) -> int:
    """A read-only descriptor for the regular file `path`, reached beneath `root` without
    following any symlink (only the last component is checked when `root` is None).

    Raises NotARegularFile, fsops.Refused (outside the root, a symlinked parent folder), or
    OSError (FileNotFoundError, PermissionError, ...).
    """
    if root is None:
        fd = _open(str(path), path, dir_fd=None)
    else:
        parts = relative_parts(root, path)
        # The configured root is trusted (it may be a symlink to a mount); below it, nothing is.
        with folder_beneath(Path(os.path.realpath(root)), parts[:-1]) as folder:
            fd = _open(parts[-1], path, dir_fd=folder)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise NotARegularFile(f"{path} is {_KINDS.get(kind, 'not a regular file')}: not read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def not_regular(path: Path) -> str | None:
    """None for a regular file; else what it is ("missing", "a symlink", "a FIFO", ...).
    For files another process (TensorFlow) reads by name: they must be checked first."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    kind = stat.S_IFMT(mode)
    return None if kind == stat.S_IFREG else _KINDS.get(kind, "not a regular file")


def tree_problem(folder: Path) -> str | None:
    """The first entry below `folder` that is not a regular file or a real folder, described."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            try:
                kind = stat.S_IFMT(os.lstat(path).st_mode)
            except FileNotFoundError:  # removed meanwhile: the reader will say so
                continue
            if kind not in (stat.S_IFREG, stat.S_IFDIR):
                return f"{path.relative_to(folder)} is {_KINDS.get(kind, 'a special file')}"
    return None


def read_bounded(path: Path, limit: int, root: Path | None = None) -> bytes | None:
    """At most `limit` bytes of `path`, or None if it holds more (nothing more is read)."""
    fd = open_regular(path, root)
    with os.fdopen(fd, "rb") as fh:
        data = read_at_most(fh, limit + 1)
    return None if len(data) > limit else data


def read_at_most(fh: BinaryIO, count: int) -> bytes:
    """Up to `count` bytes of the open regular file `fh`, from where it stands: `fh.read(count)`
    sizes its buffer by `count` before reading (64 MiB for a 30-byte JSON); this, by the file's
    size (more only if it grows meanwhile, still at most `count`)."""
    first = min(count, max(os.fstat(fh.fileno()).st_size - fh.tell(), 0) + 1)
    data = fh.read(first)
    while first <= len(data) < count:  # it had one byte more than its size: it grew
        more = fh.read(min(count - len(data), 1 << 20))
        if not more:
            break
        data += more
    return data


def _open(target: str, path: Path, *, dir_fd: int | None) -> int:
    # Looked at first, so that nothing but a regular file is ever opened (the open's own
    # O_NOFOLLOW | O_NONBLOCK and the fstat after it cover a swap in between).
    kind = stat.S_IFMT(os.stat(target, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    if kind == stat.S_IFLNK:
        raise NotARegularFile(f"{path} is a symlink: not followed")
    if kind != stat.S_IFREG:
        raise NotARegularFile(f"{path} is {_KINDS.get(kind, 'not a regular file')}: not read")
    try:
        return os.open(target, _FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile(f"{path} is a symlink: not followed") from None
        raise


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a symlink",
}
