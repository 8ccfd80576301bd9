"""Copies of a file beneath a root, made the safe way: the copying half of `fsops`.

`clone_new` copies a file a trainer wrote into a new file of ours (a kept version): a reflink
clone where the filesystem shares blocks (`FICLONE`: btrfs, XFS, bcachefs; instant and free until
the trainer rewrites its file), else an in-kernel copy (`copy_file_range`, which NFS 4.2 and
some filesystems also do without moving bytes through us). Never a hard link: a trainer
truncates and rewrites the very same inode, so a link would follow it. The copy goes to a temp
file beside its final name, is fsynced and verified by the caller, and only then published
under a name nothing else holds (`fsswap.publish_new`); a crash leaves only our temp file, which
`fsops.remove_stale_temps` removes.

`new_folder` is the same for a folder of ours (a Hugging Face inference folder): filled under a
temp name beside its final one, verified by the caller, given its model's mode and times, and
renamed to a name nothing holds; on any error it and what we put in it are removed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import Refused, WouldReplace
from . import fsswap, name_limits
from .fsops import entry_stat, folder_beneath, opened, relative_parts, remove_own_temp
from .temp_names import temp_name

FICLONE = 0x40049409  # _IOW(0x94, 9, int): linux/fs.h
_CHUNK = 64 << 20  # per copy_file_range call: bounded, and a stop request is seen between
_NO_CLONE = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV, errno.ENOSYS, errno.EPERM}
_NO_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def clone_new(
    root: Path,
    source: Path,
    target: Path,
    verify: Callable[[Path], None],
    *,
    chunk: Callable[[int], None] = lambda _copied: None,
) -> str:
    """Copy `source` to the new file `target` (both below `root`; target's folders created,
    0700), keeping source's mode and times. `verify(temp)` runs on the fsynced copy before it
    gets its name: raise to refuse (the copy is removed). `chunk(bytes_copied)` is called as the
    copy goes. Returns "reflink" or "copy". WouldReplace if `target` exists; Refused for a
    symlink or a non-regular source, NameTooLong (a Refused) for a target name over 255 bytes."""
    src_parts, dst_parts = relative_parts(root, source), relative_parts(root, target)
    name_limits.check_fits(target.name, "its copy", str(source))  # before any folder is made
    with (
        folder_beneath(root, src_parts[:-1]) as src_dir,
        folder_beneath(root, dst_parts[:-1], create=True) as dst_dir,
    ):
        if fsswap.identity_at(dst_dir, dst_parts[-1]) is not None:
            raise WouldReplace(f"{target} exists already")
        temp = temp_name(target, os.urandom(4).hex())
        with opened(_open_regular(src_dir, src_parts[-1], source)) as src:
            try:
                how = _copy_new(src, dst_dir, temp.name, chunk, keep_mode_and_times=True)
                verify(root.joinpath(*dst_parts[:-1], temp.name))
                fsswap.publish_new(dst_dir, temp.name, dst_parts[-1], f"{target} exists already")
                os.fsync(dst_dir)
            except BaseException:
                remove_own_temp(dst_dir, temp.name)
                raise
    return how


@contextmanager
def new_folder(root: Path, final: Path, *, like: Path) -> Iterator[Path]:
    """A new folder for `final` (below `root`, its parent existing): yields our temp folder
    beside it (0700, named like our temp files) to fill and verify; when the block ends without
    error the folder gets the mode and the access/modification times of the folder `like`, is
    fsynced and renamed to `final`, never replacing anything there (WouldReplace, before and at
    the rename), and the parent fsynced. On any error the temp folder is removed."""
    parts, like_parts = relative_parts(root, final), relative_parts(root, like)
    name_limits.check_fits(final.name, "the folder to write", str(final.parent))
    temp = temp_name(final, os.urandom(4).hex())
    with folder_beneath(root, like_parts[:-1]) as like_fd:
        model = entry_stat(like_fd, like_parts[-1])
    with folder_beneath(root, parts[:-1]) as fd:
        refusal = f"{final} exists: refused, nothing replaced"
        if fsswap.identity_at(fd, parts[-1]) is not None:
            raise WouldReplace(refusal)
        os.mkdir(temp.name, 0o700, dir_fd=fd)
        try:
            yield temp
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            with opened(os.open(temp.name, flags, dir_fd=fd)) as folder:
                os.fsync(folder)
                os.chmod(folder, stat.S_IMODE(model.st_mode))
                os.utime(folder, ns=(model.st_atime_ns, model.st_mtime_ns))
            fsswap.publish_new(fd, temp.name, parts[-1], refusal)
            os.fsync(fd)
        except BaseException:
            remove_own_temp(fd, temp.name)
            raise


def copy_into(root: Path, source: Path, temp: Path) -> str:
    """Copy `source` into the new file `temp` (a temp name `fsops.rewrite` handed out; both
    below `root`), fsynced; `rewrite` then gives it its times and its name."""
    src_parts, dst_parts = relative_parts(root, source), relative_parts(root, temp)
    with (
        folder_beneath(root, src_parts[:-1]) as src_dir,
        folder_beneath(root, dst_parts[:-1]) as dst_dir,
        opened(_open_regular(src_dir, src_parts[-1], source)) as src,
    ):
        return _copy_new(src, dst_dir, dst_parts[-1], lambda _n: None)


def _copy_new(
    src: int,
    dir_fd: int,
    name: str,
    chunk: Callable[[int], None],
    *,
    keep_mode_and_times: bool = False,
) -> str:
    """Copy the open file `src` into the new file `name` (0600, or with `src`'s mode and
    times) in the folder `dir_fd`, fsynced; "reflink" or "copy"."""
    info = os.fstat(src)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    out = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        how = _copy(src, out, info.st_size, chunk)
        if keep_mode_and_times:
            os.fchmod(out, stat.S_IMODE(info.st_mode))
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
        os.fsync(out)
    finally:
        os.close(out)
    return how


def _open_regular(dir_fd: int, name: str, path: Path) -> int:
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{path} is a symlink: never followed") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _copy(src: int, out: int, size: int, chunk: Callable[[int], None]) -> str:
    try:
        fcntl.ioctl(out, FICLONE, src)
        chunk(size)
        return "reflink"
    except OSError as exc:
        if exc.errno not in _NO_CLONE:
            raise
    copied = 0
    while True:
        try:
            n = os.copy_file_range(src, out, _CHUNK, copied, copied)
        except OSError as exc:
            if exc.errno not in _NO_RANGE or copied:
                raise
            return _read_write(src, out, chunk)
        if n == 0:
            break
        copied += n
        chunk(copied)
    return "copy"


def _read_write(src: int, out: int, chunk: Callable[[int], None]) -> str:
    copied = 0
    while block := os.pread(src, 4 << 20, copied):
        os.write(out, block)  # regular files: a short write raises instead
        copied += len(block)
        chunk(copied)
    return "copy"
