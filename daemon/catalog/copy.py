"""`ckpt db copy --to URL`: a whole catalog into an empty one at head (SQLite to PostgreSQL and
back), verified.

Every table is copied parents first, ids kept (events, metrics and artifacts name checkpoints
by id), in one transaction on the target; PostgreSQL's id sequences are then moved past the
copied ids, so the next insert does not collide; each run's revision (which the triggers moved
while its checkpoints landed) is set back to the source's. The copy is verified by each table's
row count and a checksum of its rows (ordered by primary key, each value in one canonical form
whatever the backend returns), computed on both sides after the commit. A target with any row in any
table is refused (exit 2): a copy never merges two catalogs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Table, bindparam, func, insert, select, text, update
from sqlalchemy.exc import OperationalError

from ..core.errors import CatalogUnreachable, CkptError, UsageError
from ..core.units import counted
from . import db
from .schema import RUNS, Base

BATCH = 2000  # rows per INSERT: bounded memory for a catalog of a million checkpoints
_SET_REVISION = (
    update(RUNS).where(RUNS.c.id == bindparam("key")).values(revision=bindparam("revision"))
)


@dataclass(frozen=True)
class TableCopy:
    table: str
    rows: int
    checksum: str  # sha256 of the table's rows in canonical form


def copy_catalog(source_url: str, target_url: str) -> list[TableCopy]:
    """Copy the catalog at `source_url` (at head: SchemaBehind otherwise) into the empty catalog
    at `target_url` (created at head if it is a new database). Returns what was verified."""
    path = db.sqlite_path(source_url) if db.is_sqlite(source_url) else None
    if path is not None and not path.is_file():  # connecting would create an empty file
        raise UsageError(f"the source catalog {path} does not exist: nothing to copy")
    source, target = db.make_engine(source_url), db.make_engine(target_url)
    try:
        _reached(source, "source")
        _reached(target, "target")
        if db.current_revision(source) is None:
            raise UsageError("the source catalog is empty (no schema): nothing to copy")
        db.ensure_schema(source_url, source)  # behind head: SchemaBehind, `ckpt db upgrade`
        db.ensure_schema(target_url, target)  # a new database is created at head first
        if _same_database(source, target):
            raise UsageError("the target is the source catalog itself")
        filled = {t: n for t, n in _counts(target).items() if n}
        if filled:
            listed = ", ".join(f"{t} ({counted(n, 'row')})" for t, n in sorted(filled.items()))
            raise UsageError(f"the target catalog is not empty: {listed}; copy into a new one")
        # One snapshot of the source for every table (SQLite: one read transaction; PostgreSQL:
        # REPEATABLE READ, its READ COMMITTED would let each table show another moment).
        snapshot = {} if db.is_sqlite(source_url) else {"isolation_level": "REPEATABLE READ"}
        with (
            source.connect().execution_options(**db.READONLY, **snapshot) as reading,
            target.begin() as writing,
        ):
            revisions: list[dict[str, Any]] = []
            for table in _tables():
                for rows in _batches(reading, table):
                    writing.execute(insert(table), rows)
                    if table is RUNS:
                        revisions += [{"key": r["id"], "revision": r["revision"]} for r in rows]
            # The triggers moved each run's revision as its checkpoints and metrics landed: the
            # source's values again, so that the copy is the source.
            for start in range(0, len(revisions), BATCH):
                writing.execute(_SET_REVISION, revisions[start : start + BATCH])
            if writing.dialect.name == "postgresql":
                _reset_sequences(writing)
        copied = summarize(source)
        landed = summarize(target)
        if copied != landed:
            differ = [c.table for c, t in zip(copied, landed, strict=True) if c != t]
            raise CkptError(f"the copy differs from its source in: {', '.join(differ)}")
        return copied
    finally:
        source.dispose()
        target.dispose()


def summarize(engine: Engine) -> list[TableCopy]:
    """Each table's row count and checksum (the verification of a copy)."""
    out = []
    snapshot = {"isolation_level": "REPEATABLE READ"} if engine.dialect.name != "sqlite" else {}
    with engine.connect().execution_options(**db.READONLY, **snapshot) as conn:
        for table in _tables():
            digest, n = hashlib.sha256(), 0
            for rows in _batches(conn, table):
                for row in rows:
                    digest.update(_canonical(table, row))
                    n += 1
            out.append(TableCopy(table.name, n, digest.hexdigest()))
    return out


def _tables() -> list[Table]:
    return list(Base.metadata.sorted_tables)  # parents before the tables that refer to them


def _batches(conn: Any, table: Table) -> Iterator[list[dict[str, Any]]]:
    query = select(table).order_by(*table.primary_key.columns)
    result = conn.execution_options(yield_per=BATCH).execute(query)
    for partition in result.mappings().partitions(BATCH):
        yield [dict(row) for row in partition]


def _canonical(table: Table, row: dict[str, Any]) -> bytes:
    """One row as bytes that do not depend on the backend: JSON with sorted keys (booleans as
    booleans, JSON columns as the values they hold)."""
    values = [row[c.name] for c in table.columns]
    return json.dumps(values, sort_keys=True, default=str).encode() + b"\n"


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect().execution_options(**db.READONLY) as conn:
        return {
            t.name: int(conn.execute(select(func.count()).select_from(t)).scalar() or 0)
            for t in _tables()
        }


def _reached(engine: Engine, which: str) -> None:
    """CatalogUnreachable, one line naming the server, for a database that does not answer (an
    unknown host, a refused connection or login), as every other command says it. SQLite
    files are checked by `ensure_schema` (a path it cannot open is a config error)."""
    if engine.url.get_backend_name() == "sqlite":
        return
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        url = engine.url
        where = (
            f"database {url.database or '?'} on {url.host or url.query.get('host') or 'localhost'}"
        )
        detail = " ".join(str(exc.orig).split())
        raise CatalogUnreachable(
            f"cannot connect to the {which} catalog ({where}): {detail}"
        ) from None


def _same_database(source: Engine, target: Engine) -> bool:
    a, b = source.url, target.url
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        pa, pb = db.sqlite_path(str(a)), db.sqlite_path(str(b))
        return pa is not None and pb is not None and pa.resolve() == pb.resolve()
    return (a.host, a.port, a.database, a.query.get("host")) == (
        b.host,
        b.port,
        b.database,
        b.query.get("host"),
    )


def _reset_sequences(conn: Any) -> None:
    """Each serial id's sequence continues after the largest copied id (inserts with explicit
    ids do not advance it)."""
    for table in _tables():
        (key, *more) = table.primary_key.columns
        if more or not key.autoincrement or key.type.python_type is not int:
            continue
        if table.c[key.name].foreign_keys:  # leases: keyed by their run, no sequence
            continue
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{key.name}'), "
                f"COALESCE((SELECT MAX({key.name}) FROM {table.name}), 0) + 1, false)"
            )
        )
