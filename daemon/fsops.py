"""The only module that changes files: today, removing our own leftover temp files.

Every rewrite of ours writes `.ckpt-tmp-<pid>-<token>-<name>` in the destination folder first;
a crash can leave one behind. The service removes those at start: only names with our prefix,
never through a symlink, and only when the writing process is gone (or the file is a day old).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

TEMP_PREFIX = ".ckpt-tmp-"
STALE_AFTER_SECONDS = 86400.0


def temp_name(final: Path, token: str) -> Path:
    return final.with_name(f"{TEMP_PREFIX}{os.getpid()}-{token}-{final.name}")


def stale_temps(root: Path, now: float) -> Iterator[Path]:
    """Our temp files under `root` whose writer is dead, or that are older than a day."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            if not name.startswith(TEMP_PREFIX):
                continue
            path = Path(dirpath) / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (
                not _alive(_writer_pid(name)) or now - info.st_mtime > STALE_AFTER_SECONDS
            ):
                yield path


def remove_stale_temps(root: Path) -> list[Path]:
    removed = []
    for path in stale_temps(root, time.time()):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue
    return removed


def _writer_pid(name: str) -> int | None:
    head = name[len(TEMP_PREFIX) :].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True
