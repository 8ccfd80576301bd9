"""The only module that changes files: trash, restore, purge, atomic rewrites, leftover temps.

Containment: every path is reached by walking directory file descriptors from its root with
O_NOFOLLOW, so neither the file nor any parent folder may be a symlink (a link could lead out of
the root, or be swapped in between a check and the act). Deletion is two-phase: a rename into
`<root>/.ckpt-trash/` (same filesystem), then a purge after a grace period; where rename fails
(`RenameUnsupported`: EXDEV, ENOTSUP, EPERM, ENOSYS) the files stay at their path until the
purge deletes them there, if they are still the very files trashed (`purge(in_place=...)`).
Rewrites go to `.ckpt-tmp-<pid>h<host>-<token>-<name>` in the same folder (`temp_names`: the
name bounded to 255 bytes), are fsynced, then renamed over the target, and the folder is
fsynced.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from ..core.errors import Refused, RenameUnsupported, WouldReplace
from ..core.model import FileStat
from . import fsswap, name_limits, procfs
from .fsswap import Identity
from .temp_names import TEMP_PREFIX, stale_temps, temp_name

TRASH_DIR = ".ckpt-trash"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# rename(2) is not there: another mount (EXDEV), an object store's FUSE mount (ENOTSUP, ENOSYS,
# EPERM: mountpoint-s3#1174, gcsfuse#2570)
_NO_RENAME = {errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS}


# ---- walking beneath a root without following links ----


def relative_parts(root: Path, path: Path) -> tuple[str, ...]:
    """`path` relative to `root`, by name only; refuses anything outside or with `..`."""
    try:
        parts = Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).parts
    except ValueError:
        raise Refused(f"{path} is outside its root {root}") from None
    if not parts or ".." in parts:
        raise Refused(f"{path} is not a file below its root {root}")
    return parts


@contextmanager
def folder_beneath(root: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor for `root/parts...`, reached without following any symlink."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if create:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{part} under {root} is a symlink or not a folder") from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def entry_stat(dir_fd: int, name: str) -> os.stat_result:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise Refused(f"{name} is a symlink: never followed, never moved")
    return info


def current_stat(root: Path, members: Sequence[Path]) -> FileStat:
    """(summed size, newest mtime, first inode) of `members`, read beneath `root`."""
    size = newest = 0
    inode: int | None = None
    for member in members:
        parts = relative_parts(root, member)
        with folder_beneath(root, parts[:-1]) as fd:
            info = entry_stat(fd, parts[-1])
        if stat.S_ISDIR(info.st_mode):
            tree = _tree_stat(member)
            # A folder with no file yet (a save killed as it began) is as new as its creation.
            mtime = tree.mtime_ns or info.st_mtime_ns
            size, newest = size + tree.size, max(newest, mtime)
        else:
            size, newest = size + info.st_size, max(newest, info.st_mtime_ns)
        inode = info.st_ino if inode is None else inode
    return FileStat(size, newest, inode)


def _tree_stat(folder: Path) -> FileStat:
    size = newest = 0
    for dirpath, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            info = os.lstat(os.path.join(dirpath, name))
            size, newest = size + info.st_size, max(newest, info.st_mtime_ns)
    return FileStat(size, newest, None)


# ---- trash, restore, purge ----


def move_to_trash(root: Path, members: Sequence[Path], batch: str) -> list[Path]:
    """Rename `members` (one checkpoint: a file, a TF set, a SavedModel folder) into the trash.

    All or nothing: if one member cannot move, the ones already moved are put back.
    """
    moved: list[tuple[Path, Path]] = []
    try:
        for member in members:
            parts = relative_parts(root, member)
            target_parts = (TRASH_DIR, batch, *parts)
            _rename_beneath(root, parts, target_parts)
            moved.append((member, root.joinpath(*target_parts)))
    except BaseException:
        for original, trashed in reversed(moved):
            _rename_beneath(root, relative_parts(root, trashed), relative_parts(root, original))
        with suppress(OSError, Refused):  # the batch's folders made for the failed member
            _prune_empty(root, (TRASH_DIR, batch, *relative_parts(root, member)[:-1]))
        raise
    return [trashed for _original, trashed in moved]


def restore(root: Path, trashed: Sequence[Path], originals: Sequence[Path]) -> None:
    """Put trashed members back where they were; refused if anything is there again."""
    for target in originals:
        if _exists(root, relative_parts(root, target)):
            raise Refused(f"{target} exists again: move it away before restoring")
    for source, target in zip(trashed, originals, strict=True):
        _rename_beneath(root, relative_parts(root, source), relative_parts(root, target))
        _prune_empty(root, relative_parts(root, source)[:-1])


def _exists(root: Path, parts: Sequence[str]) -> bool:
    try:
        with folder_beneath(root, parts[:-1]) as fd:
            entry_stat(fd, parts[-1])
    except FileNotFoundError:
        return False
    return True


def purge(root: Path, trashed: Sequence[Path], *, in_place: FileStat | None = None) -> int:
    """Delete trashed members for good; returns the bytes freed. Empty trash folders go too.
    `in_place`: members trashed where they are (rename impossible), deleted there only if
    they are still the files trashed (this stat), else left alone (a new save took the path)."""
    freed = 0
    if in_place is not None:
        try:
            if current_stat(root, trashed) != in_place:
                return 0
        except FileNotFoundError:  # gone already (its trainer's rotation): nothing to delete
            return 0
    for path in trashed:
        parts = relative_parts(root, path)
        if parts[0] != TRASH_DIR and in_place is None:
            raise Refused(f"{path} is not in the trash")
        with folder_beneath(root, parts[:-1]) as fd:
            try:
                info = entry_stat(fd, parts[-1])
            except FileNotFoundError:
                continue
            freed += _remove(fd, parts[-1], info)
            os.fsync(fd)
        if in_place is None:
            _prune_empty(root, parts[:-1])
    return freed


def _remove(dir_fd: int, name: str, info: os.stat_result) -> int:
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return info.st_size
    freed = 0
    with opened(os.open(name, _DIR_FLAGS, dir_fd=dir_fd)) as child:
        for entry in os.listdir(child):
            freed += _remove(child, entry, os.stat(entry, dir_fd=child, follow_symlinks=False))
    os.rmdir(name, dir_fd=dir_fd)
    return freed


def _prune_empty(root: Path, parts: Sequence[str]) -> None:
    """Remove now-empty folders of a trash batch, deepest first, never the trash itself."""
    for depth in range(len(parts), 1, -1):
        with folder_beneath(root, parts[: depth - 1]) as fd:
            try:
                os.rmdir(parts[depth - 1], dir_fd=fd)
            except OSError:
                return


def _rename_beneath(root: Path, source: Sequence[str], target: Sequence[str]) -> None:
    with (
        folder_beneath(root, source[:-1]) as src_fd,
        folder_beneath(root, target[:-1], create=True) as dst_fd,
    ):
        entry_stat(src_fd, source[-1])
        try:
            os.rename(source[-1], target[-1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError as exc:
            if exc.errno in _NO_RENAME:
                raise RenameUnsupported(
                    f"{root.joinpath(*source)} cannot be renamed into {TRASH_DIR} "
                    f"({errno.errorcode[exc.errno]}: {exc.strerror})"
                ) from None
            raise
        os.fsync(dst_fd)
        os.fsync(src_fd)


@contextmanager
def opened(fd: int) -> Iterator[int]:
    """The descriptor `fd`, closed when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


# ---- atomic rewrites ----


def atomic_write(root: Path, path: Path, data: bytes, *, temp_suffix: str = "") -> None:
    """Replace `path` (below `root`) with `data`: temp file, fsync, rename, fsync the folder.
    `temp_suffix` ends the temp file's name (`.tmp`: a reader globbing `*.prom` skips it)."""
    parts = relative_parts(root, path)
    temp = temp_name(path, os.urandom(4).hex(), temp_suffix).name
    with folder_beneath(root, parts[:-1]) as fd:
        try:
            mode = stat.S_IMODE(entry_stat(fd, parts[-1]).st_mode)
        except FileNotFoundError:
            mode = 0o644
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode, dir_fd=fd)
        try:
            os.write(out, data)
            os.fsync(out)
        finally:
            os.close(out)
        try:
            os.rename(temp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(temp, dir_fd=fd)
            raise
        os.fsync(fd)


def write_state_file(path: Path, data: bytes) -> None:
    """A small file of ours outside every root (`ckpt serve`'s remembered config): its folders
    made private if missing, then written as `atomic_write` does (a reader never sees half)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(path.parent, path, data)


def reserve_room(path: Path, size: int) -> bool:
    """A state file of ours holding `size` bytes of real blocks (our room on a full disk,
    `usecases.catalog_room`): allocated under a temp name, then renamed into place, so a crash
    leaves either no file, or a whole one, or a temp that `remove_stale_temps` removes. False
    (nothing left behind) when the filesystem has no room for it."""
    temp = temp_name(path, os.urandom(4).hex())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            for offset in range(0, size, 1 << 16):  # no fallocate: real zeros
                os.pwrite(fd, bytes(min(1 << 16, size - offset)), offset)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(temp, path)
        return True
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return False
    finally:
        if fd >= 0:
            os.close(fd)
        with suppress(FileNotFoundError):
            os.unlink(temp)


def release_room(path: Path) -> int:
    """Delete the state file `reserve_room` made; returns the bytes its blocks held (0: none)."""
    try:
        held = os.stat(path, follow_symlinks=False).st_blocks * 512
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return held


@contextmanager
def rewrite(
    root: Path, final: Path, *, like: Path | None = None, replacing: Identity | None = None
) -> Iterator[Path]:
    """Write a new file for `final` (below `root`) safely: yields a temp path in the same folder
    to write into; when the block ends without error, the temp file gets the mode and the
    access/modification times of the file it stands for (so retention still sees when the
    trainer wrote it), is fsynced and given the name `final`, and the folder fsynced. On any
    error (or a crash) nothing reaches `final`, and the temp file is removed (after a crash, by
    `remove_stale_temps`). Verify inside the block: the rename happens only after it.

    In place (`like` None): `final` must still be the very file it was when the caller first
    looked, before reading a byte of it (`replacing`, taken with `identity`; else when the
    block began): inode, size, mtime, ctime; and no local process may have it open for
    writing, else Refused and nothing replaced (see `fsswap.replace_if_same`: atomic on local
    filesystems, the swapped-out file re-checked after a short grace before it is deleted).
    A new file (`like`: the file it derives from, whose mode and times it takes): nothing at
    `final` is ever replaced (WouldReplace), unless it is `replacing` still unchanged."""
    parts = relative_parts(root, final)
    name_limits.check_fits(final.name, "the file to write", str(final.parent))
    temp = temp_name(final, os.urandom(4).hex())
    with folder_beneath(root, parts[:-1]) as fd:
        expected: Identity | None
        if like is None:
            model = expected = _identity(fd, parts[-1], final)
            if replacing is not None and not replacing.same_file(model):
                raise Refused(f"{final} not replaced: it changed since it was read")
            model = expected = replacing or model
        else:
            like_parts = relative_parts(root, like)
            with folder_beneath(root, like_parts[:-1]) as like_fd:
                model, expected = _identity(like_fd, like_parts[-1], like), replacing
            if expected is None and fsswap.identity_at(fd, parts[-1]) is not None:
                raise WouldReplace(_would_replace(final))
        old: str | None = None
        try:
            yield temp
            with opened(os.open(temp.name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)) as out:
                os.chmod(out, model.mode)
                os.utime(out, ns=(model.atime_ns, model.mtime_ns))
                os.fsync(out)
            old = _put(fd, temp.name, final, expected)
            os.fsync(fd)
        except BaseException:
            remove_own_temp(fd, temp.name)
            raise
        if old is not None:  # the file replaced, swapped out to the temp name
            os.unlink(old, dir_fd=fd)
            os.fsync(fd)


def _would_replace(final: Path) -> str:
    return f"{final} exists and is not ours to replace: move it away, or write elsewhere (--out)"


def _identity(dir_fd: int, name: str, path: Path) -> Identity:
    info = entry_stat(dir_fd, name)  # refuses a symlink; FileNotFoundError if gone
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{path} is not a regular file")
    return Identity.of(info)


def _put(dir_fd: int, temp: str, final: Path, expected: Identity | None) -> str | None:
    if expected is None:
        fsswap.publish_new(dir_fd, temp, final.name, _would_replace(final))
        return None

    def writers(name: str) -> list[int]:
        # By the inode the name holds, not by path: /proc shows a path as the kernel resolves
        # it, which differs from ours when a folder above the root is a symlink or a bind mount.
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return []
        return procfs.writers_of(info.st_dev, info.st_ino)

    try:
        return fsswap.replace_if_same(dir_fd, temp, final.name, expected, writers)
    except fsswap.Changed as exc:
        raise Refused(f"{final} not replaced: {exc}") from None


def identity(root: Path, path: Path) -> Identity | None:
    """Which file `path` (below `root`) is now, or None if there is none."""
    parts = relative_parts(root, path)
    with folder_beneath(root, parts[:-1]) as fd:
        return fsswap.identity_at(fd, parts[-1])


# ---- our own leftovers (`temp_names` finds them) ----


def remove_stale_temps(root: Path, *, recursive: bool = True) -> list[Path]:
    removed = []
    for path in stale_temps(root, time.time(), recursive=recursive):
        try:
            with opened(os.open(path.parent, _DIR_FLAGS)) as fd:
                remove_own_temp(fd, path.name)
            removed.append(path)
        except FileNotFoundError:
            continue
    return removed


def remove_own_temp(dir_fd: int, name: str) -> None:
    """Remove our temp file, or our temp folder and what we put in it (`temp_names`: only
    names with our prefix; nothing of anyone else's is ever in them), no link followed."""
    if not name.startswith(TEMP_PREFIX):
        raise Refused(f"{name} is not one of our temp names: never removed")
    with suppress(FileNotFoundError):
        _remove(dir_fd, name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
