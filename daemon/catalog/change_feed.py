"""How a reader learns that the catalog changed, without polling it: `ckpt wait`'s wake-up.

PostgreSQL: every write that can bring a new complete checkpoint (`Index.record`, `Index.mark`,
the epochs and metrics derivation writes back: `set_derived_many`) runs `pg_notify` in its own
transaction (`announce`), so the notification leaves with the commit, from whichever host's
daemon wrote; a `PostgresListener` (psycopg, `LISTEN`) wakes on it.
SQLite: a commit writes the database file or its `-wal` (watched by `service.watcher`'s
`FileChanges`), and `SqliteCounter` reads `PRAGMA data_version`, which moves only when another
connection committed: a cheap check that a wake-up is a real change.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import text

CHANNEL = "ckpt_catalog"


def announce(conn: Any) -> None:
    """Tell PostgreSQL listeners the catalog changed, when this transaction commits."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})


class PostgresListener:
    """`LISTEN ckpt_catalog` on its own autocommit connection."""

    def __init__(self, keywords: dict[str, str]) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self._connection: Any = psycopg.connect(make_conninfo(**keywords), autocommit=True)
        self._connection.execute(f"LISTEN {CHANNEL}")

    def wait(self, timeout_s: float) -> bool:
        """True once a notification came within `timeout_s` (all pending ones are taken)."""
        got = False
        for _note in self._connection.notifies(timeout=max(0.0, timeout_s), stop_after=1):
            got = True
        if got:  # several writes in a row: one wake-up for all of them
            for _note in self._connection.notifies(timeout=0.0):
                pass
        return got

    def close(self) -> None:
        self._connection.close()


class SqliteCounter:
    """`PRAGMA data_version` of one SQLite file, on a connection of its own."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(
            f"{path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None
        )
        self._last = self._version()

    def _version(self) -> int:
        return int(self._connection.execute("PRAGMA data_version").fetchone()[0])

    def changed(self) -> bool:
        """Whether another connection committed since the last call."""
        now = self._version()
        moved, self._last = now != self._last, now
        return moved

    def close(self) -> None:
        self._connection.close()
