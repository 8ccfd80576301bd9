"""Putting a new file at a name without losing what someone else put there meanwhile.

Two moves, both on names inside one folder descriptor (part of `fsops`, the only modules that
change files):

- `publish_new`: the name must not exist; if a file appears there at the last moment it is
  never replaced (`renameat2(RENAME_NOREPLACE)`, else `link` + `unlink`, which also fails on an
  existing name).
- `replace_if_same`: the name must still hold the very file we read (inode, size, mtime, ctime)
  and no local process may have it open for writing. On Linux filesystems that support it,
  `renameat2(RENAME_EXCHANGE)` swaps our file in and the old one out in one step; then the file
  swapped out is checked, at once and again after a short grace (`SETTLE_SECONDS`): if it is not
  the one we read, or someone has it open for writing (a writer saved in between, or had just
  opened the name when it was swapped), it is swapped back and the rewrite refused, so a
  trainer's save is never replaced by older weights. What remains: a writer whose open() of the
  old name stalls longer than the grace before truncating, or one on another host (NFS), writes
  into the file swapped out after it is deleted.
  Where the exchange is not supported (NFS, some FUSE), the same checks run right before a
  plain rename: a save landing between that check and the rename remains possible there.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..core.errors import Changed, WouldReplace
from .name_limits import bounded
from .temp_names import temp_name

RENAME_NOREPLACE = 1
SETTLE_SECONDS = 0.1  # the grace before the file swapped out is judged unwritten
RENAME_EXCHANGE = 2
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM)

Writers = Callable[[str], list[int]]  # name in the folder -> pids holding it open for writing


@dataclass(frozen=True)
class Identity:
    """Which file a name held when we looked, and the metadata a rewrite carries over."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    atime_ns: int
    mode: int

    @classmethod
    def of(cls, info: os.stat_result) -> Identity:
        return cls(
            info.st_ino,
            info.st_size,
            info.st_mtime_ns,
            info.st_ctime_ns,
            info.st_atime_ns,
            stat.S_IMODE(info.st_mode),
        )

    def same_file(self, other: Identity | None, *, ctime: bool = True) -> bool:
        """The same inode with the same bytes as far as metadata tells (a rename changes the
        ctime of what it moves, so a file we moved ourselves is compared without it)."""
        if other is None:
            return False
        keys = ("inode", "size", "mtime_ns") + (("ctime_ns",) if ctime else ())
        return all(getattr(self, k) == getattr(other, k) for k in keys)


def identity_at(dir_fd: int, name: str) -> Identity | None:
    try:
        return Identity.of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except FileNotFoundError:
        return None


def publish_new(dir_fd: int, temp: str, name: str, refusal: str) -> None:
    """Give `temp` the name `name`; WouldReplace(`refusal`) if anything is (or appears) there."""
    try:
        _publish(dir_fd, temp, name)
    except FileExistsError:
        raise WouldReplace(refusal) from None


def _publish(dir_fd: int, temp: str, name: str) -> None:
    if _renameat2(dir_fd, temp, name, RENAME_NOREPLACE):
        return
    try:
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise  # FileExistsError among them
        if identity_at(dir_fd, name) is not None:  # no hard links here: check, then rename
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name) from None
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    os.unlink(temp, dir_fd=dir_fd)


def move_new(src_fd: int, old: str, dst_fd: int, new: str) -> bool:
    """Move `old` (in folder `src_fd`) to the name `new` in folder `dst_fd`, a file or a
    folder; False, nothing moved, if anything is (or appears) at `new`
    (`renameat2(RENAME_NOREPLACE)`; where unsupported, a check right before a plain rename)."""
    fn = _libc_renameat2()
    if fn is not None:
        if fn(src_fd, os.fsencode(old), dst_fd, os.fsencode(new), RENAME_NOREPLACE) == 0:
            return True
        import ctypes

        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code not in _UNSUPPORTED:
            raise OSError(code, os.strerror(code), new)
    try:
        os.stat(new, dir_fd=dst_fd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        os.rename(old, new, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return True


def replace_if_same(
    dir_fd: int, temp: str, name: str, expected: Identity, writers: Writers
) -> str | None:
    """Put `temp` at `name` only if `name` still holds `expected` and nobody writes it.

    Returns the name now holding the old file (`temp`, after an exchange: the caller deletes
    it) or None (a plain rename replaced it). Raises Changed, having replaced nothing."""
    _check(dir_fd, name, expected, writers, ctime=True)
    ours = identity_at(dir_fd, temp)
    if not _renameat2(dir_fd, temp, name, RENAME_EXCHANGE):
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return None
    try:  # `temp` now holds what was at `name` at the instant of the swap
        _check(dir_fd, temp, expected, writers, ctime=False)
        # A writer whose open() resolved `name` just before the swap truncates and writes the
        # file swapped out once that open() returns, which may be after the look above (its
        # descriptor not yet in /proc, its truncation not yet done). Look again after a grace
        # long enough for an open() to finish on a loaded machine, before the caller deletes it.
        time.sleep(SETTLE_SECONDS)
        _check(dir_fd, temp, expected, writers, ctime=False)
    except Changed:
        _swap_back(dir_fd, temp, name, ours)
        raise
    return temp


def _check(dir_fd: int, name: str, expected: Identity, writers: Writers, *, ctime: bool) -> None:
    # Writers first: one that closes before we look has already changed what we compare next.
    busy = writers(name)
    if busy:
        raise Changed(f"it is open for writing by pid {', '.join(map(str, sorted(busy)))}")
    if not expected.same_file(identity_at(dir_fd, name), ctime=ctime):
        raise Changed("it changed since it was read (a new save?)")


def _swap_back(dir_fd: int, temp: str, name: str, ours: Identity | None) -> None:
    """Put the writer's file back at `name`, unless someone already wrote over ours there
    too: then both stay (theirs at `name`, the other one under a name of its own, kept)."""
    still_ours = ours is not None and ours.same_file(identity_at(dir_fd, name), ctime=False)
    if still_ours and _renameat2(dir_fd, temp, name, RENAME_EXCHANGE):
        return
    keep = bounded("", name, f".ckpt-kept-{os.getpid()}")  # fits, whatever the name's length
    os.rename(temp, keep, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    raise Changed(f"it changed while being replaced; the file it held is kept as {keep}")


@cache
def _libc_renameat2() -> Callable[..., int] | None:
    import ctypes  # here, not at the top: a read-only command never pays for it

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28, or not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _renameat2(dir_fd: int, old: str, new: str, flags: int) -> bool:
    """True if done; False if this system or filesystem does not support `flags`."""
    fn = _libc_renameat2()
    if fn is None:
        return False
    if fn(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), flags) == 0:
        return True
    import ctypes

    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), new)


def rename_probe(root: Path, trash_dir: str) -> str | None:
    """Whether a file renames from `root` into `root/trash_dir` (made if missing) here: None
    if it does, else the errno that said no (an object store's FUSE mount, a read-only root).
    The probe is a new empty temp file of ours (`temp_names`), removed at once."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    name = temp_name(root / "rename-probe", os.urandom(4).hex()).name
    root_fd = os.open(root, flags)
    try:
        with suppress(FileExistsError):
            os.mkdir(trash_dir, 0o700, dir_fd=root_fd)
        trash_fd = os.open(trash_dir, flags, dir_fd=root_fd)
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=root_fd))
            try:
                os.rename(name, name, src_dir_fd=root_fd, dst_dir_fd=trash_fd)
            except OSError as exc:
                os.unlink(name, dir_fd=root_fd)
                return f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
            os.unlink(name, dir_fd=trash_fd)
            return None
        finally:
            os.close(trash_fd)
    except OSError as exc:  # no room, read-only, not ours to write
        return f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
    finally:
        os.close(root_fd)
