"""Stopping a process that writes an SQLite catalog without stopping the catalog with it.

SQLite has one writer at a time: a process stopped (SIGSTOP) inside a write transaction keeps
the write lock, and every other process's write then waits out the busy timeout (30 s) and
fails with `database is locked`. That is SQLite's nature, not what a test that pauses a
daemon or a prune means to test, so such a test stops the process between transactions."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path


def write_locked(db: Path) -> bool:
    """Whether a transaction holds the catalog's write lock now (a try with no wait)."""
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


def stop_between_transactions(pid: int, db: Path, tries: int = 1000) -> None:
    """SIGSTOP `pid` at a moment it holds no write transaction of catalog `db`: stopped, then
    let go on for a moment and stopped again while the lock is held."""
    for _ in range(tries):
        os.kill(pid, signal.SIGSTOP)
        if not write_locked(db):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError(f"process {pid} held the catalog's write lock at every try")
