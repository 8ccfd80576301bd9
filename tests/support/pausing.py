"""Stopping a process that writes a catalog without stopping the catalog with it.

A process stopped (SIGSTOP) inside a write transaction keeps its locks: on SQLite (one writer
at a time) every other process's write then waits out the busy timeout (30 s) and fails with
`database is locked`; on PostgreSQL a write to the rows it holds waits as long as it stays
stopped. That is the databases' nature, not what a test that pauses a daemon, a prune or a
lease holder means to test, so such a test stops the process between transactions."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

from .catalogs import sql

SQLITE = "sqlite:///"


def write_locked(db: Path) -> bool:
    """Whether a transaction holds the SQLite catalog's write lock now (a try with no wait)."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        return True
    finally:
        conn.close()


def in_transaction(url: str) -> bool:
    """Whether another connection is inside a transaction of the catalog at `url` now: on
    SQLite the write lock held, on PostgreSQL a client session of its database not idle."""
    if url.startswith(SQLITE):
        return write_locked(Path(url[len(SQLITE) :]))
    busy = sql(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        " AND state <> 'idle'",
    )
    return bool(busy[0][0])


def stop_between_transactions(pid: int, url: str, tries: int = 1000) -> None:
    """SIGSTOP `pid` at a moment it is in no transaction of the catalog at `url` (an SQLite
    file's is `sqlite:///PATH`): stopped, then let go on for a moment and stopped again while
    one is open."""
    for _ in range(tries):
        os.kill(pid, signal.SIGSTOP)
        if not in_transaction(url):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError(f"process {pid} was inside a catalog transaction at every try")
