"""The hot reads (`dbapi_reads`) on a local SQLite catalog file, with the standard library's
sqlite3 alone. Any catalog this module is not sure about (not a local SQLite file at the schema
head, a URL with options) is left to the `Store`, which creates, refuses or explains."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from ..core.root_names import PathCodec
from ..fs import mounts
from .dbapi_reads import SCHEMA_HEAD, SQLITE, DbapiReads, at_head

__all__ = ["SCHEMA_HEAD", "SqliteReads"]

BUSY_TIMEOUT_S = 30.0
# Plain file URLs only: `sqlite:///relative.db`, `sqlite:////absolute.db` (no options, no quoting).
_PLAIN_SQLITE_URL = re.compile(r"^sqlite(?:\+pysqlite)?:///([^?%#]+)$")


class SqliteReads(DbapiReads):
    """Read-only queries on one SQLite catalog file; `open` says whether it can serve them."""

    @classmethod
    def open(
        cls, url: str, codec: PathCodec | None = None, *, as_file: bool = False
    ) -> SqliteReads | None:
        """A reader for `url` if it is a local SQLite catalog at the schema head, else None.
        `codec`: the config's named roots (their paths are stored relative to the name).
        `as_file`: the main file read as it is, without locks, shared memory or write-ahead log
        (SQLite's `immutable`): what `ckpt status` reads when the catalog's disk is too full for
        SQLite to make its `-shm` file; what a writer committed since the last checkpoint of
        the log is not seen."""
        match = _PLAIN_SQLITE_URL.match(url)
        if match is None:
            return None
        path = Path(match.group(1))
        if not path.is_file() or mounts.network_type(path.parent):
            return None
        try:
            connection = sqlite3.connect(
                f"{path.absolute().as_uri()}?{'mode=ro&immutable=1' if as_file else 'mode=rw'}",
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error:
            return None
        if not at_head(connection):
            connection.close()
            return None
        return cls(connection, SQLITE, codec)
