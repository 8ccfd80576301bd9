"""The catalog's hot reads (`hot_reads`) through a plain DB-API connection: the standard
library's sqlite3 (`sqlite_reads`) or psycopg (`postgres_reads`).

`ckpt best` is called in loops by scripts: importing SQLAlchemy and the Store costs more than the
rest of the command together (about 1 s, against 1-16 ms of SQL on a catalog of a million rows).
The statements and the row shaping are the Store's own (`read_sql`, `hot_reads`): only the
connection differs. tests/integration/test_sqlite_reads.py runs these and the Store on one
catalog of each backend and compares. Any catalog the openers are not sure about is left to the
`Store`, which creates, refuses or explains."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..core.root_names import PathCodec
from .hot_reads import Fetch, HotReads
from .read_sql import POSTGRESQL, SQLITE, Dialect, Statement

__all__ = ["POSTGRESQL", "SCHEMA_HEAD", "SQLITE", "DbapiReads", "at_head"]

# The Alembic revision this code's schema is at (migrations/versions; a test keeps it equal to
# catalog.db's): a catalog elsewhere goes through the Store.
SCHEMA_HEAD = "0010"


def at_head(connection: Any) -> bool:
    """Is the catalog on `connection` at this code's schema head (False on any error)?"""
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except Exception:  # any driver's error: no table, no permission, not a catalog
        return False
    return row is not None and row[0] == SCHEMA_HEAD


class DbapiReads(HotReads):
    """Read-only queries on one catalog through one DB-API connection (autocommit: each read
    opens its own transaction); the openers (`SqliteReads.open`, `PostgresReads.open`) say
    whether they can serve a catalog."""

    def __init__(self, connection: Any, dialect: Dialect, codec: PathCodec | None = None) -> None:
        self._db = connection
        # One connection, any thread (as the Store's pool allows): one query sequence at a time.
        self._lock = threading.Lock()
        super().__init__(self._transaction, dialect, codec)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[Fetch]:
        def fetch(statement: Statement) -> builtins.list[Sequence[Any]]:
            sql, params = statement
            return builtins.list(self._db.execute(sql, params).fetchall())

        with self._lock:
            self._db.execute(self._dialect.begin)
            try:
                yield fetch
            finally:
                self._db.execute("COMMIT")  # after an error PostgreSQL makes it a ROLLBACK
