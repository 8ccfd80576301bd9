"""The receiving half of `fsops` for object storage: a file streamed back from the store
becomes a new file only once it is whole and its hash is the catalog's.

Chunks go to our temp file beside the final name (`fsops.temp_name`: a crash leaves a temp that
the next start removes, never a half file under the checkpoint's name), are hashed as they are
written, fsynced, checked, given the indexed mtime, and published with `renameat2(NOREPLACE)`:
whatever appeared at the name meanwhile (a trainer's new save) is never replaced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from ..core.errors import HashMismatch, Refused, WouldReplace
from .fsops import folder_beneath, opened, relative_parts, temp_name
from .fsswap import identity_at, publish_new
from .hashing import StreamHash

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def receive(
    final: Path,
    chunks: Iterable[bytes],
    *,
    expected_hash: str,
    root: Path | None = None,
    mtime_ns: int | None = None,
) -> os.stat_result:
    """Write `chunks` as the new file `final` (beneath `root` when given: reached without
    following a symlink). Returns the published file's stat."""
    destination: AbstractContextManager[int]
    if root is not None:
        parts = relative_parts(root, final)
        destination = folder_beneath(root, parts[:-1])
    else:
        parts = (final.name,)
        destination = plain_folder(final.parent)
    temp = temp_name(final, os.urandom(4).hex()).name
    with destination as fd:
        if identity_at(fd, parts[-1]) is not None:
            raise WouldReplace(f"{final} exists: never replaced (move it away or use --to)")
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=fd)
        try:
            digest = StreamHash()
            with os.fdopen(out, "wb", closefd=False) as sink:
                for chunk in chunks:
                    digest.update(chunk)
                    sink.write(chunk)
                sink.flush()
                os.fsync(out)
            if digest.value() != expected_hash:
                raise HashMismatch(
                    f"{final}: the bytes fetched hash to {digest.value()}, the catalog has"
                    f" {expected_hash}: nothing written"
                )
            if mtime_ns is not None:
                os.utime(temp, ns=(mtime_ns, mtime_ns), dir_fd=fd, follow_symlinks=False)
            publish_new(fd, temp, parts[-1], f"{final} appeared meanwhile: never replaced")
            temp = ""
            os.fsync(fd)
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(out)
            if temp:
                os.unlink(temp, dir_fd=fd)


@contextmanager
def plain_folder(folder: Path) -> Iterator[int]:
    """A descriptor of a folder outside the roots (`ckpt fetch --to`), no symlink at its end."""
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        raise Refused(f"{folder} does not exist: create the folder first") from None
    with opened(fd):
        yield fd
