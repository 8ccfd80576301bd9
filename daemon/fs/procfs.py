"""Which local processes hold files open for writing, from /proc (Linux; elsewhere: none).

One pass over /proc/*/fd per call: `readlink` (or `stat`) every descriptor, and read the open
flags only of those that point into the folders (or at the file) asked about.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


def writers_under(folders: Iterable[Path]) -> dict[str, list[int]]:
    """{file path: [pids]} for files below `folders` that some process has open for writing."""
    prefixes = tuple(str(f).rstrip("/") + "/" for f in folders)
    found: dict[str, list[int]] = {}
    for pid, fd in _descriptors():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(prefixes) and _opened_for_writing(fd):
            found.setdefault(target, []).append(int(pid))
    return found


def writers_of(device: int, inode: int) -> list[int]:
    """The pids that hold the file (`device`, `inode`) open for writing, whatever name it has
    now (or none): each descriptor is matched by what it points to, not by its path."""
    found: list[int] = []
    for pid, fd in _descriptors():
        if found and found[-1] == int(pid):
            continue  # this process is already counted
        try:
            info = os.stat(fd)
        except OSError:
            continue
        if (info.st_ino, info.st_dev) == (inode, device) and _opened_for_writing(fd):
            found.append(int(pid))
    return found


def _descriptors() -> Iterator[tuple[str, str]]:
    """(pid, "/proc/PID/fd/N") for every descriptor of every process we may look at."""
    for pid in _pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to look at
        for fd in fds:
            yield pid, f"{fd_dir}/{fd}"


def _pids() -> list[str]:
    try:
        return [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _opened_for_writing(fd: str) -> bool:
    """Whether the descriptor "/proc/PID/fd/N" was opened for writing (its fdinfo flags)."""
    try:
        with open(fd.replace("/fd/", "/fdinfo/", 1)) as info:
            for line in info:
                if line.startswith("flags:"):
                    return bool(int(line.split()[1], 8) & _WRITE_FLAGS)
    except (OSError, ValueError, IndexError):
        pass
    return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
