"""Whether a catalog error is its disk being full: the one state the service waits out (it
resumes when space returns) rather than dies of (issue 40: `ckpt serve` with its catalog on a
full filesystem exited 1 at start, and systemd restarted it into the same).

SQLite says "database or disk is full" when a page cannot be written, and "disk I/O error"
when it cannot grow its WAL index (`-shm`) or journal: the latter counts as full only while the
catalog's filesystem has (almost) no free space, so a real I/O error is still one. PostgreSQL
says SQLSTATE 53100 (disk_full) when its server's disk is full."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

NEARLY_FULL_BYTES = 1 << 20  # less free than this, an SQLite I/O error is a lack of space
PG_DISK_FULL = "53100"


def disk_full(exc: BaseException, catalog_file: Path | None) -> str | None:
    """A one-line reason when `exc` (or an error it was raised from) is the catalog's disk out
    of space, else None. `catalog_file`: the SQLite catalog's file (`settings.config.
    sqlite_file`; None for a server's catalog). No SQLAlchemy here: `ckpt status` imports it."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        reason = _reason(error, catalog_file)
        if reason is not None:
            return reason
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return None


def nearly_full(catalog_file: Path | None) -> str | None:
    """Why the SQLite catalog's disk is (all but) full now, measured: less than
    `NEARLY_FULL_BYTES` free. None otherwise, and for a server's catalog."""
    free = free_bytes(catalog_file)
    if free is None or free >= NEARLY_FULL_BYTES:
        return None
    return _full(catalog_file, free)


def free_bytes(catalog_file: Path | None) -> int | None:
    """Free bytes (for unprivileged users) on the SQLite catalog's filesystem; None for a
    server's catalog or where it cannot be measured."""
    return None if catalog_file is None else _free(catalog_file.parent)


def _reason(error: BaseException, catalog_file: Path | None) -> str | None:
    if getattr(error, "sqlstate", None) == PG_DISK_FULL:
        return f"the catalog's database server has no space left ({str(error).splitlines()[0]})"
    if not isinstance(error, sqlite3.OperationalError):
        return None
    text = str(error)
    free = free_bytes(catalog_file)
    if "database or disk is full" in text:
        return _full(catalog_file, free)
    if "disk I/O error" in text and free is not None and free < NEARLY_FULL_BYTES:
        return _full(catalog_file, free)
    return None


def _full(path: Path | None, free: int | None) -> str:
    left = "" if free is None else f", {free} bytes free"
    return f"no space left on the catalog's disk ({path.parent if path else 'its folder'}{left})"


def _free(folder: Path) -> int | None:
    try:
        found = os.statvfs(folder)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize
