"""Engine setup and schema migrations for the catalog (the only module that imports Alembic).

SQLite gets WAL, a busy timeout, synchronous=FULL and foreign keys on each new connection, and
writer transactions start with `BEGIN IMMEDIATE`: SQLAlchemy's default deferred transactions lose
concurrent read-modify-write updates across processes (two writers both read, both write,
one update is lost; IMMEDIATE takes the write lock before the read).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError

from .. import PACKAGE, python_module
from ..core.errors import CkptError, ConfigError, SchemaBehind, UsageError
from ..fs import mounts

# Kept in step with migrations/versions by tests/integration/test_catalog.py, so that opening a
# catalog does not have to import Alembic to learn the head revision.
SCHEMA_HEAD = "0010"
READONLY = {"ckpt_readonly": True}  # execution option: `BEGIN DEFERRED` instead of IMMEDIATE
BUSY_TIMEOUT_MS = 30_000
MIGRATION_LOCK = 0x636B7074  # "ckpt": PostgreSQL's advisory lock key while migrating


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for in-memory databases)."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str, *, foreign_keys: bool = True) -> Engine:
    check_url(url)
    if not is_sqlite(url):
        engine = _create_engine(url, pool_pre_ping=True, json_serializer=_finite_json)
        if engine.dialect.driver == "psycopg":
            _install_psycopg_hooks(engine)
        return engine
    path = sqlite_path(url)
    if path is not None:
        try:
            # One level only (state_dir itself): a mistyped URL must not build a folder tree
            # and an empty catalog somewhere unexpected.
            path.parent.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise UsageError(
                f"cannot create the catalog folder {path.parent}: its parent does not exist"
            ) from None
        except OSError as exc:
            raise UsageError(f"cannot create the catalog folder {path.parent}: {exc}") from exc
        _refuse_network_filesystem(path)
    engine = _create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
    _install_sqlite_hooks(engine, foreign_keys=foreign_keys)
    return engine


def check_url(url: str) -> None:
    """Refuse (exit 2) a catalog URL SQLAlchemy cannot parse or has no dialect for (also run by
    `ckpt config check`, so that what it passes `serve` accepts)."""
    if "\0" in url:
        raise ConfigError("database", "the URL holds a NUL character")
    try:
        parsed = make_url(url)
    except ArgumentError:  # the URL itself is not repeated: it may hold a password
        raise ConfigError(
            "database",
            "not an SQLAlchemy URL like sqlite:///path/catalog.db or postgresql+psycopg://host/db",
        ) from None
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise ConfigError(
            "database",
            f"SQLAlchemy has no dialect {parsed.drivername!r} (e.g. sqlite, postgresql+psycopg)",
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise ConfigError(
            "database", f"the driver of {parsed.drivername!r} is not installed: {exc}"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(
            "database", "an in-memory SQLite catalog is empty for every command: name a file"
        )


def check_options(url: str) -> None:
    """Refuse (exit 2) a URL whose query options the driver cannot take, connecting nowhere
    (an engine connects on first use): said before anything else is said of the catalog."""
    _create_engine(url).dispose()


def _create_engine(url: str, **options: Any) -> Engine:
    try:
        return create_engine(url, **options)
    except (ValueError, TypeError) as exc:  # a query option the driver cannot take
        raise ConfigError("database", f"bad option: {exc}") from None


def _refuse_network_filesystem(path: Path) -> None:
    # WAL needs shared memory between the processes of one host.
    fstype = mounts.network_type(path.parent)
    if fstype:
        raise UsageError(
            f"the SQLite catalog {path} is on {fstype}: SQLite in WAL mode needs a local disk; "
            "put state_dir on a local disk or use a PostgreSQL URL"
        )


def _install_sqlite_hooks(engine: Engine, *, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the DBAPI level, so that the `begin` hook below decides how transactions
        # start, and PRAGMAs run outside any transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        readonly = conn.get_execution_options().get("ckpt_readonly", False)
        conn.exec_driver_sql("BEGIN DEFERRED" if readonly else "BEGIN IMMEDIATE")


def clock(conn: Any) -> dt.datetime:
    """Now, by the database's clock where there is one (PostgreSQL: hosts of a fleet may
    disagree; the server is the one clock they share), else this host's (SQLite is local)."""
    if conn.dialect.name == "postgresql":
        moment = conn.execute(text("SELECT now()")).scalar()
        return moment.astimezone(dt.UTC)
    from .audit import now  # the catalog's one clock

    return now()


def identify(engine: Engine, *, named_roots: Mapping[str, str] | None, node: str | None) -> None:
    """What `engine` writes as this process: paths below these roots ({name: local path})
    stored relative to their names (`schema.CatalogPath`), and `node` on every audit event
    (`audit.record_event`). Both ride on the dialect, which each engine has its own of."""
    from .schema import PathCodec

    engine.dialect.ckpt_path_codec = PathCodec(named_roots or {})  # type: ignore[attr-defined]
    engine.dialect.ckpt_node = node  # type: ignore[attr-defined]


def inserted_id(conn: Any, statement: Any) -> int:
    """Run an INSERT in the caller's transaction: the id of its new row."""
    key = conn.execute(statement).inserted_primary_key
    assert key is not None, "INSERT returned no primary key"
    return int(key[0])


def serialize(conn: Any, *key: object) -> None:
    """Serialize the caller's write transaction with every other one that names the same `key`
    (a row that may not exist yet: a path, a run, a run's lease), until it commits.

    SQLite: nothing to do, `BEGIN IMMEDIATE` already serializes every writer. PostgreSQL: a
    transaction-scoped advisory lock, because READ COMMITTED lets two transactions read the same
    state, and `SELECT ... FOR UPDATE` cannot lock a row that is not there yet (two inserts of
    one path: one fails on the unique index; two bumps of one counter: one is lost)."""
    if conn.dialect.name == "postgresql":
        from .schema import path_codec

        codec = path_codec(conn.dialect)  # hosts that mount a shared root elsewhere: one key
        parts = [
            codec.stored(k) if codec is not None and isinstance(k, str) else str(k) for k in key
        ]
        conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
            {"key": "\x1f".join(parts)},
        )


def _finite_json(value: Any) -> str:
    """JSON for PostgreSQL's `json` columns, which refuse NaN and Infinity (SQLite stores
    Python's `NaN` token as it is): a non-finite float in `details` (a hostile file's optimizer
    config, a diverged learning rate) becomes null, as non-finite metrics do."""
    return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _install_psycopg_hooks(engine: Engine) -> None:
    """PostgreSQL's text cannot hold NUL, which a hostile file's names may (SQLite keeps it):
    each NUL becomes U+FFFD, the replacement character, instead of failing the whole write."""
    from psycopg.types.string import StrBinaryDumper, StrDumper, StrDumperUnknown

    def nul_free(base: Any) -> Any:
        class NulFree(base):
            def dump(self, obj: str) -> Any:
                return super().dump(obj.replace("\0", "\ufffd"))

        return NulFree

    dumpers = [nul_free(d) for d in (StrBinaryDumper, StrDumper, StrDumperUnknown)]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        for dumper in dumpers:  # the last one of each format wins: unknown-typed text, as before
            dbapi_connection.adapters.register_dumper(str, dumper)


def current_revision(engine: Engine) -> str | None:
    """The catalog's schema revision, or None for an empty database."""
    with engine.connect().execution_options(**READONLY) as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def revision_at(url: str) -> str | None:
    """`ckpt db current`: the schema revision of the catalog at `url` (None: empty)."""
    engine = make_engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def ensure_schema(url: str, engine: Engine, *, may_migrate: bool = False) -> None:
    """Create a new catalog at head; refuse (exit 5) one behind head unless allowed to migrate."""
    try:
        revision = current_revision(engine)
    except DatabaseError as exc:
        # SQLITE_NOTADB (a URL naming some other file) is exactly DatabaseError, and SQLite
        # cannot open a path it cannot create; other errors (locked, I/O) are runtime failures.
        if type(exc.orig) is sqlite3.DatabaseError:
            raise ConfigError("database", f"{sqlite_path(url)} is not an SQLite catalog") from None
        if "unable to open database file" in str(exc.orig):
            raise ConfigError("database", f"SQLite cannot open {make_url(url).database}") from None
        raise
    if revision == SCHEMA_HEAD:
        return
    if revision is not None and not may_migrate and not _left_half_made(engine, revision):
        raise SchemaBehind(
            f"catalog schema is at {revision}, this ckpt needs {SCHEMA_HEAD}: run `ckpt db upgrade`"
        )
    if may_migrate:
        _upgrade_in_child(url)  # the long-running service never keeps Alembic loaded (~13 MB)
    else:
        upgrade(url)


def _upgrade_in_child(url: str) -> None:
    done = subprocess.run(
        [*python_module("catalog.db"), "upgrade", url], capture_output=True, text=True
    )
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise CkptError(f"catalog migration failed: {lines[-1] if lines else done.returncode}")


def upgrade(url: str, *, revision: str = "head") -> str | None:
    """Migrate to `revision`; back up an existing SQLite file first. Returns the backup path."""
    engine = make_engine(url, foreign_keys=False)
    if revision == "head" and current_revision(engine) == SCHEMA_HEAD:
        engine.dispose()
        return None
    backup = _backup_sqlite(url)
    _alembic(engine, "upgrade", revision, check_foreign_keys=is_sqlite(url))
    return str(backup) if backup else None


def downgrade(url: str, revision: str) -> None:
    _alembic(make_engine(url, foreign_keys=False), "downgrade", revision)


def _alembic(engine: Engine, verb: str, revision: str, *, check_foreign_keys: bool = False) -> None:
    """Run an Alembic command on a dedicated connection of `engine` (foreign keys off), every
    step in ONE transaction: Alembic alone commits after each migration on SQLite (it deems its
    DDL non-transactional; SQLite's is transactional), so a process killed while it created a
    catalog left it at some middle revision, and every later command asked for `ckpt db
    upgrade`. Now a kill leaves the catalog as it was (empty: the next command creates it), or
    at the target. The transaction starts by taking the catalog's write lock (SQLite's `BEGIN
    IMMEDIATE`; on PostgreSQL an advisory lock of the transaction), and Alembic reads the
    revision under it: two commands creating one catalog at once run one after the other, and
    the second finds nothing left to do."""
    from alembic import command

    try:
        with engine.connect() as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            config = _alembic_config()
            config.attributes["connection"] = conn  # in a transaction: Alembic commits nothing
            getattr(command, verb)(config, revision)
            if check_foreign_keys:
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:  # raised inside the transaction: rolled back, the catalog as it was
                    raise CkptError(f"migration left {len(broken)} rows with broken foreign keys")
    finally:
        engine.dispose()


def _left_half_made(engine: Engine, revision: str) -> bool:
    """A catalog at one of our revisions before head without a single row (beyond its revision):
    one that an older ckpt was creating when it was killed (it committed each migration alone),
    or never used. Nothing in it can be harmed by migrating, so any command finishes it instead
    of asking for `ckpt db upgrade`. (Revisions are numbered 0001, 0002, ...: one outside that
    range is not ours to finish.)"""
    if not (revision.isdigit() and "0001" <= revision < SCHEMA_HEAD):
        return False
    with engine.connect().execution_options(**READONLY) as conn:
        tables = [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
        for table in tables:
            quoted = conn.dialect.identifier_preparer.quote(table)
            if conn.execute(text(f"SELECT 1 FROM {quoted} LIMIT 1")).first() is not None:
                return False
    return True


def _alembic_config() -> Any:
    from importlib.util import find_spec

    from alembic.config import Config

    # The repository's top-level migrations/ installs as ckpt_daemon.migrations.
    spec = find_spec(f"{PACKAGE}.migrations")
    assert spec is not None and spec.origin is not None, "the package ships its migrations"
    config = Config()
    config.set_main_option("script_location", str(Path(spec.origin).parent))
    return config


def _backup_sqlite(url: str) -> Path | None:
    """Copy an existing, non-empty SQLite catalog aside (online backup API) before migrating."""
    path = sqlite_path(url) if is_sqlite(url) else None
    if path is None or not path.exists() or path.stat().st_size == 0:
        return None
    source = sqlite3.connect(path)
    try:
        row = source.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='alembic_version'"
        ).fetchone()
        if row is None:
            return None
        version = source.execute("SELECT version_num FROM alembic_version").fetchone()
        target_path = path.with_name(f"{path.name}.bak-{version[0] if version else 'none'}")
        target = sqlite3.connect(target_path)
        try:
            source.backup(target)
        finally:
            target.close()
        return target_path
    finally:
        source.close()


if __name__ == "__main__":  # `_upgrade_in_child`: python -m ckpt_daemon.catalog.db upgrade URL
    upgrade(sys.argv[2])


def out_of_space(exc: BaseException) -> bool:
    """A catalog write that failed for lack of disk space (SQLite's SQLITE_FULL, "database or
    disk is full"; PostgreSQL's disk_full, 53100), wrapped by SQLAlchemy or not: the disk guard
    then gives its catalog the room it kept (`usecases.catalog_room`) and tries again."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return True
    return getattr(orig, "sqlstate", None) == "53100" or "database or disk is full" in str(exc)


class Facet:
    """One part of the catalog (an attribute of `store.Store`: `store.acts`, `store.leases`):
    its reads and writes over the Store's engine, which it never hands out."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _read(self, statement: Any) -> list[Any]:
        """The rows of one statement, in a read-only transaction of its own."""
        with self._engine.connect().execution_options(**READONLY) as conn:
            return list(conn.execute(statement).all())
