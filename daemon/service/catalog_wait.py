"""`ckpt wait` / `Catalog.wait`: block until a new complete checkpoint of a run is in the catalog.

It sleeps on the catalog's change, not on a timer: on PostgreSQL a `LISTEN` that every
daemon's write notifies (any host sharing the catalog), on SQLite inotify on the database file
and its `-wal` with `PRAGMA data_version` as the cheap check that a wake-up was a commit
(`catalog.change_feed`). The waker is armed before the first look, so a save landing between
the look and the sleep still wakes it. A look every `RECHECK_S` anyway covers what no event
tells (inotify cannot see a commit made by another host on a network filesystem: SQLite is
never shared that way, but a lost event must not turn into a wait until the timeout).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from ..catalog import change_feed
from ..catalog.postgres_reads import conninfo_parts
from ..core.errors import ConfigError, NotFound, UsageError
from ..core.model import Checkpoint
from ..core.wait_match import WaitFor, pick, sick_news
from . import watcher

RECHECK_S = 5.0


class Waker(Protocol):
    def wait(self, timeout_s: float) -> bool: ...

    def close(self) -> None: ...


# After a write to the catalog file with no commit visible yet, how long to keep looking, and
# how often: a transaction's frames reach the `-wal` before its commit is published in the WAL
# index (`-shm`, memory-mapped: no inotify event), so the write that wakes us often comes just
# before the commit it belongs to (seen: waits of 0.2-0.6 s, until the next write woke them).
FOLLOW_S = 0.5
FOLLOW_STEP_S = 0.01


class _SqliteWaker:
    def __init__(self, path: Path) -> None:
        names = {path.name, f"{path.name}-wal"}
        self._path = path
        self._files = watcher.FileChanges(path.parent, names)
        self._counter = change_feed.SqliteCounter(path)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            touched = self._files.wait(deadline - time.monotonic())
            if touched and not self._path.exists():
                return True  # the catalog deleted: a look now says so (`SqliteFileCheck`)
            if self._counter.changed():
                return True
            if not touched or time.monotonic() >= deadline:
                return False
            if self._follow(min(deadline, time.monotonic() + FOLLOW_S)):
                return True
            # no commit came of it: a checkpoint of the WAL, a read lock; sleep on events again

    def _follow(self, until: float) -> bool:
        """Right after a write: whether a commit becomes visible before `until` (looked at
        every FOLLOW_STEP_S, and at once on a further write)."""
        while time.monotonic() < until:
            self._files.wait(min(FOLLOW_STEP_S, until - time.monotonic()))
            if self._counter.changed():
                return True
        return False

    def close(self) -> None:
        self._files.close()
        self._counter.close()


class _Timer:
    """No change feed for this catalog (an SQLAlchemy URL psycopg cannot take as it is)."""

    def wait(self, timeout_s: float) -> bool:
        time.sleep(max(0.0, min(timeout_s, 1.0)))
        return True

    def close(self) -> None:
        pass


def waker_for(database: str, sqlite_file: Path | None) -> Waker:
    if sqlite_file is not None:
        return _SqliteWaker(sqlite_file)
    keywords = conninfo_parts(database)
    if keywords is not None:
        return change_feed.PostgresListener(keywords)
    return _Timer()


class SqliteFileCheck:
    """The SQLite catalog a wait reads is still the file it opened, and still a catalog: one
    deleted meanwhile would be read through its open descriptor until the timeout (nothing is
    ever committed to it again), one overwritten fails its next read with SQLite's "database
    disk image is malformed". Either is said as such (exit 2), as a command starting on such a
    file says it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode = _inode(path)

    def __call__(self) -> None:
        inode = _inode(self.path)
        if inode is None:
            raise UsageError(
                f"no catalog at {self.path}: it was deleted while waiting (nothing will be "
                "saved to it again): run `ckpt wait` again once its daemon has a catalog"
            )
        if inode != self._inode:
            raise UsageError(
                f"the catalog {self.path} was replaced by another file while waiting: run "
                "`ckpt wait` again to wait on the new one"
            )
        try:
            with open(self.path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise UsageError(f"cannot read the catalog {self.path}: {exc.strerror}") from None
        if header != SQLITE_HEADER:
            why = "is no longer an SQLite catalog (overwritten while waiting)"
            raise ConfigError("database", f"{self.path} {why}")


SQLITE_HEADER = b"SQLite format 3\x00"


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def wait_for(
    wanted: WaitFor,
    rows: Callable[[], Iterable[Checkpoint]],
    waker: Waker,
    timeout_s: float,
    recheck_s: float = RECHECK_S,
    check: Callable[[], None] = lambda: None,
) -> Checkpoint:
    """The new checkpoint `wanted` describes, once `rows()` (the run's ok rows) holds one.
    NotFound (exit 6) when `timeout_s` passes first; `check()`, before each look and after a
    look that failed, raises when the catalog itself went away (`SqliteFileCheck`)."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            check()
            looked = list(rows())
            found = pick(looked, wanted)
            if found is not None:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                sick = sick_news(looked, wanted)
                said = "".join(f"; passed over {p}: {why}" for p, why in list(sick.items())[:3])
                raise NotFound(
                    f"no new complete checkpoint of run {wanted.run!r} within {timeout_s:g}s" + said
                )
            waker.wait(min(remaining, recheck_s))
    except Exception:
        check()  # a read or a wake-up failed because the catalog went away: say that
        raise
    finally:
        waker.close()
