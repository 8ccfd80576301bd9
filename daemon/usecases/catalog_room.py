"""The disk guard's own room on a full disk: its bookkeeping never needs the space it frees.

Every act of the guard writes the catalog first (the run's lease, the claim, the planned audit
event), so with an SQLite catalog on the filesystem it guards, a full disk made every act fail
before it freed a byte. The service therefore keeps ROOM_BYTES of real blocks in a file of ours
beside the catalog (`.ckpt-guard-room`, allocated ahead while there is space to spare) and hands
them to the catalog when the disk is nearly full (less than twice the room free) or a catalog
write failed for lack of space: the file is deleted before the guard acts, and made again once
free space is back above `min_free` plus its size. A crash leaves the file whole or absent
(`fsops.reserve_room`: made under a temp name), never a catalog that cannot record what the
guard did.

Only an SQLite catalog on a guarded filesystem (a root with `min_free` on the same device) gets
the room; PostgreSQL keeps its own disk. ROOM_BYTES covers many acts: SQLite's WAL reuses the
space it already holds, and each act adds a few rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from ..catalog import db
from ..core.units import format_size
from ..fs import fsops
from ..logs import event
from ..settings.config import Config

ROOM_BYTES = 1 << 20
ROOM_NAME = ".ckpt-guard-room"


def room_path(config: Config) -> Path | None:
    """Where the room is kept: beside an SQLite catalog file; None for any other catalog."""
    if not db.is_sqlite(config.database):
        return None
    catalog = db.sqlite_path(config.database)
    return None if catalog is None else catalog.parent / ROOM_NAME


def tend(config: Config, floors: Mapping[int, int], *, starved: bool = False) -> int:
    """Release the room when the catalog's filesystem is nearly full (less than twice the room
    free) or a catalog write just failed for lack of space (`starved`); make it when free space
    is at least the floor plus the room (`floors`: device -> the guard's threshold in bytes, of
    the guarded filesystems), so the room itself never puts a disk under pressure. Returns the
    bytes released (negative: taken)."""
    path = room_path(config)
    if path is None:
        return 0
    try:
        dev = os.stat(path.parent).st_dev
        st = os.statvfs(path.parent)
    except OSError:  # no state folder yet (the catalog makes it)
        return 0
    free = st.f_bavail * st.f_frsize
    floor = floors.get(dev)
    held = path.exists()
    if held and (floor is None or starved or free < 2 * ROOM_BYTES):
        freed = fsops.release_room(path)
        event(
            "catalog_room_released",
            level=logging.INFO if floor is not None else logging.DEBUG,
            path=str(path),
            bytes=freed,
            reason=(
                f"free {format_size(free)} (min_free {format_size(floor)}): the room kept for "
                "the catalog's writes, given to the guard's bookkeeping"
                if floor is not None
                else "no guarded root on the catalog's filesystem"
            ),
        )
        return freed
    made = not held and floor is not None and free >= floor + ROOM_BYTES
    if made and fsops.reserve_room(path, ROOM_BYTES):
        event("catalog_room_kept", level=logging.DEBUG, path=str(path), bytes=ROOM_BYTES)
        return -ROOM_BYTES
    return 0
