"""The names of our temp files and which of them are leftovers. A rewrite's temp file sits beside
its target as `.ckpt-tmp-<pid>h<host>-<token>-<name>` (bounded to 255 bytes:
`name_limits.bounded`): the writer's pid and a tag of its host, so a cleanup on a shared (NFS)
folder never judges another host's live writer by a local pid. A leftover is one whose writer is
dead, or a day old. Reads only: `fsops.remove_stale_temps` removes them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from . import name_limits, procfs

TEMP_PREFIX = ".ckpt-tmp-"
STALE_AFTER_SECONDS = 86400.0


@cache
def _host_tag() -> str:
    """This host in our temp names. Computed when first needed: hashlib and socket cost a
    read-only command such as `ckpt best` (which only stats files) ~10 ms of start-up."""
    import hashlib
    import socket

    return hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()


def temp_name(final: Path, token: str, suffix: str = "") -> Path:
    """Our temp file for `final`, beside it: `<temp_prefix><token>-<final's name><suffix>`,
    within 255 bytes for every legal name (a long one is hashed, its end kept)."""
    return final.with_name(name_limits.bounded(f"{temp_prefix()}{token}-", final.name, suffix))


def temp_prefix() -> str:
    """`.ckpt-tmp-<pid>h<host>-`: the writer's pid and a tag of its host, so a cleanup on a
    shared (NFS) folder never judges another host's live writer by a local pid."""
    return f"{TEMP_PREFIX}{os.getpid()}h{_host_tag()}-"


def stale_temps(root: Path, now: float, *, recursive: bool = True) -> Iterator[Path]:
    """Our temp files under `root` (or only in it) whose writer is dead, or a day old, and our
    temp folders (an inference folder being filled, `fsclone.new_folder`) the same way."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        ours = [d for d in dirnames if d.startswith(TEMP_PREFIX)]
        dirnames[:] = (
            []
            if not recursive
            else [
                d
                for d in dirnames
                if not os.path.islink(os.path.join(dirpath, d)) and d not in ours
            ]
        )
        for name in [*filenames, *ours]:
            if not name.startswith(TEMP_PREFIX):
                continue
            path = Path(dirpath) / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            kind = stat.S_ISDIR if name in ours else stat.S_ISREG
            # ctime, not mtime: a finished temp already carries the original's (old) mtime.
            if kind(info.st_mode) and (
                _writer_gone(name) or now - info.st_ctime > STALE_AFTER_SECONDS
            ):
                yield path


def _writer_gone(name: str) -> bool:
    """The temp's writer is known dead: its pid, on this host, is not running. A temp of
    another host (shared folder) is never judged by a local pid: only its age counts."""
    pid, _, host = name[len(TEMP_PREFIX) :].split("-", 1)[0].partition("h")
    if host and host != _host_tag():
        return False
    # ASCII digits of a possible pid (Linux's pid_max is at most 2**22: 7 digits): "²".isdigit()
    # is true too, and a longer "pid" overflows os.kill; neither can be a live writer of ours.
    ok = pid.isascii() and pid.isdigit() and len(pid) <= 7
    return not _alive(int(pid) if ok else None)


def _alive(pid: int | None) -> bool:
    return pid is not None and procfs.pid_alive(pid)
