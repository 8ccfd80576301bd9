"""The catalog's hot reads (`best`, `latest`, listings, the status counts) through a plain DB-API
connection: the standard library's sqlite3 (`sqlite_reads`) or psycopg (`postgres_reads`).

`ckpt best` is called in loops by scripts: importing SQLAlchemy and the Store costs more than the
rest of the command together (about 1 s, against 1-16 ms of SQL on a catalog of a million rows).
These are the same queries as `store_reads` (and `Store.count`, `Store.heartbeats`), written as
SQL once: what differs between the two databases is a `Dialect` (placeholders, the code point
order of run-name ranges, JSON columns as text or as values). Stored paths of named roots are
converted as the Store's column types convert them (`core.root_names`): stored -> local on every
path read, local -> stored for path arguments. tests/integration/test_sqlite_reads.py runs these
and the Store on one catalog of each backend and compares. Any catalog the openers are not sure
about is left to the `Store`, which creates, refuses or explains."""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..core.model import Checkpoint, CheckpointStatus, Format, Heartbeat, Kind
from ..core.query import COLUMN_KEYS, OFF_DISK, ListQuery
from ..core.resume import LEGACY_H5_RESUMES_IN, MAY_RESUME
from ..core.root_names import PathCodec
from ..core.runs import run_scope
from . import pick
from .rows import HEARTBEAT_ROWS, LISTING_COLUMNS, newest_per_node, to_checkpoint

# The Alembic revision this code's schema is at (migrations/versions; a test keeps it equal to
# catalog.db's): a catalog elsewhere goes through the Store.
SCHEMA_HEAD = "0008"
# What a listing reads, in the order `rows.to_checkpoint` unpacks it (as store_reads reads it).
_LIST_COLUMNS = ", ".join(f"{table}.{column}" for table, column in LISTING_COLUMNS)
_CANDIDATE_COLUMNS = ", ".join(f"{table}.{column}" for table, column in pick.CANDIDATE_COLUMNS)
_FROM = "FROM checkpoints JOIN runs ON runs.id = checkpoints.run_id"
_OPERATORS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "!="}
# SQL: a finite number (catalogs written before NaN/inf became NULL hold +/-Infinity).
_FINITE = "BETWEEN ? AND ?"
_FINITE_BOUNDS = (-sys.float_info.max, sys.float_info.max)
# `latest`'s order, as store_reads._newest_first: unknown iterations, epoch, step sort last.
_NEWEST_FIRST = (
    ", ".join(
        f"checkpoints.{c} IS NULL, checkpoints.{c} DESC" for c in ("iterations", "epoch", "step")
    )
    + ", checkpoints.mtime_ns DESC, checkpoints.id DESC"
)
# `latest --resumable`'s filter, as store_reads._may_resume: rows `core.resume` may call resumable.
_MAY_RESUME = (
    f"checkpoints.format IN ({', '.join('?' * len(MAY_RESUME))})"
    " AND checkpoints.optimizer_bytes > 0 AND (checkpoints.format != ? OR (checkpoints.kind = ?"
    f" AND ({' OR '.join(['checkpoints.keras_version LIKE ?'] * len(LEGACY_H5_RESUMES_IN))})))"
)
_MAY_RESUME_PARAMS = (
    *(f.value for f in MAY_RESUME),
    Format.KERAS_LEGACY_H5.value,
    Kind.FULL.value,
    *(f"{m}.%" for m in LEGACY_H5_RESUMES_IN),
)
_GONE = (
    CheckpointStatus.MISSING.value,
    CheckpointStatus.REMOVED.value,
    CheckpointStatus.TRASHED.value,
    CheckpointStatus.PURGED.value,
)


# Where a listing (and candidate) row holds a path column (`CatalogPath` in the schema).
_PATH_AT = tuple(
    i
    for i, column in enumerate(LISTING_COLUMNS)
    if column in (("checkpoints", "path"), ("runs", "root"), ("checkpoints", "version_of"))
)


@dataclasses.dataclass(frozen=True)
class Dialect:
    """What differs between the databases for these queries (the SQL is written with `?`)."""

    placeholder: str  # the driver's parameter marker: "?" (sqlite3) or "%s" (psycopg)
    begin: str  # a read-only transaction: one snapshot for a listing and its metrics
    # Appended to runs.name where a run's name range is compared: code point order, as
    # store_reads.in_run (schema.codepoint_order), so PostgreSQL's index on it serves.
    codepoint: str = ""
    json_as_text: bool = True  # JSON columns arrive as text (SQLite) or decoded (psycopg)
    # PostgreSQL's text cannot hold NUL: the Store binds U+FFFD for it (db._install_psycopg_hooks)
    text_holds_nul: bool = True


SQLITE = Dialect(placeholder="?", begin="BEGIN DEFERRED")
POSTGRESQL = Dialect(
    placeholder="%s",
    begin="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    codepoint=' COLLATE "C"',
    json_as_text=False,
    text_holds_nul=False,
)


def at_head(connection: Any) -> bool:
    """Is the catalog on `connection` at this code's schema head (False on any error)?"""
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except Exception:  # any driver's error: no table, no permission, not a catalog
        return False
    return row is not None and row[0] == SCHEMA_HEAD


class DbapiReads:
    """Read-only queries on one catalog through one DB-API connection (autocommit: each method
    opens its own transaction); the openers (`SqliteReads.open`, `PostgresReads.open`) say
    whether they can serve a catalog."""

    def __init__(self, connection: Any, dialect: Dialect, codec: PathCodec | None = None) -> None:
        self._db = connection
        self._dialect = dialect
        self._codec = codec if codec else None
        # One connection, any thread (as the Store's pool allows): one query sequence at a time.
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        if self._dialect.placeholder != "?":
            assert "%" not in sql, "a literal % in SQL for a %s driver"
            sql = sql.replace("?", self._dialect.placeholder)
        if not self._dialect.text_holds_nul:
            params = [p.replace("\0", "\ufffd") if isinstance(p, str) else p for p in params]
        return builtins.list(self._db.execute(sql, params).fetchall())

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        """Listing or candidate rows, their paths local (as the Store's `CatalogPath` reads)."""
        rows = self._read(sql, params)
        codec = self._codec
        if codec is None:
            return rows
        out = []
        for row in rows:
            values = builtins.list(row)
            for i in _PATH_AT:
                if values[i] is not None:
                    values[i] = codec.local(values[i])
            out.append(tuple(values))
        return out

    def _json(self, value: Any) -> Any:
        """A JSON column's value, its paths local (as the Store's `CatalogJSON` reads)."""
        if self._dialect.json_as_text:
            value = json.loads(value) if value is not None else None
        if value is not None and self._codec is not None:
            value = self._codec.local_tree(value)
        return value

    def _begin(self) -> None:
        self._db.execute(self._dialect.begin)

    def _end(self) -> None:
        self._db.execute("COMMIT")  # after an error PostgreSQL makes it a ROLLBACK

    def _in_run(self, run: str) -> tuple[str, builtins.list[Any]]:
        """SQL: in run `run` or a run below it, as store_reads.in_run."""
        scope = run_scope(run)
        if scope.exact is None:
            return "1 = 1", []
        name = f"runs.name{self._dialect.codepoint}"
        return f"({name} = ? OR ({name} >= ? AND {name} < ?))", [
            scope.exact,
            scope.low,
            scope.high,
        ]

    def _stored(self, local: str) -> str:
        return self._codec.stored(local) if self._codec is not None else local

    def list(self, query: ListQuery) -> builtins.list[Checkpoint]:
        sql, params = _listing(query, self._in_run, self._stored)
        with self._lock:
            self._begin()
            try:
                rows = self._rows(sql, params)
                whole = query == ListQuery(sort=query.sort, descending=query.descending)
                values = self._metric_values([r[0] for r in rows], whole_table=whole)
            finally:
                self._end()
        return [to_checkpoint(r, values.get(r[0], {})) for r in rows]

    def version_counts(self, paths: builtins.list[str]) -> dict[str, int]:
        """As store_reads.version_counts."""
        counted = (CheckpointStatus.STANDBY.value, *OFF_DISK)
        out: dict[str, int] = {}
        with self._lock:
            for start in range(0, len(paths), 500):
                chunk = [self._stored(p) for p in paths[start : start + 500]]
                rows = self._read(
                    "SELECT version_of, count(*) FROM checkpoints WHERE version_of IN "
                    f"({', '.join('?' * len(chunk))}) AND status NOT IN "
                    f"({', '.join('?' * len(counted))}) GROUP BY version_of",
                    [*chunk, *counted],
                )
                for stored, n in rows:
                    out[self._codec.local(stored) if self._codec else stored] = n
        return out

    def metric_names(self) -> set[str]:
        """As store_reads.metric_names."""
        with self._lock:
            return {row[0] for row in self._read("SELECT DISTINCT name FROM metrics")}

    def has_metric(self, name: str) -> bool:
        """As store_reads.has_metric."""
        with self._lock:
            return bool(self._read("SELECT 1 FROM metrics WHERE name = ? LIMIT 1", [name]))

    def best(self, metric: str, mode: str, run: str | None = None) -> Checkpoint:
        order = "ASC" if mode == "min" else "DESC"
        sql = (
            f"SELECT {_CANDIDATE_COLUMNS} {_FROM} JOIN metrics ON metrics.checkpoint_id = "
            f"checkpoints.id AND metrics.name = ? WHERE checkpoints.status = ? AND "
            f"metrics.value {_FINITE}"
        )
        params: list[Any] = [metric, CheckpointStatus.OK.value, *_FINITE_BOUNDS]
        if run is not None:
            condition, bounds = self._in_run(run)
            sql += f" AND {condition}"
            params += bounds
        sql += f" ORDER BY metrics.value {order}, checkpoints.mtime_ns DESC, checkpoints.id DESC"
        where = f" in run {run!r}" if run else ""
        with self._lock:
            self._begin()
            try:
                outcome = self._pick(sql, params)
                if outcome.row is None:
                    raise pick.not_found(outcome, f"ok checkpoint{where} has metric {metric!r}")
                return self._complete(outcome)
            finally:
                self._end()

    def latest(self, run: str | None = None, resumable: bool = False) -> Checkpoint:
        """As `store_reads.latest`, clause for clause."""
        sql = f"SELECT {_CANDIDATE_COLUMNS} {_FROM} WHERE checkpoints.status = ?"
        params: list[Any] = [CheckpointStatus.OK.value]
        if run is not None:
            condition, bounds = self._in_run(run)
            sql += f" AND {condition}"
            params += bounds
        judged = f"{sql} AND {_MAY_RESUME}"
        order = f" ORDER BY {_NEWEST_FIRST}"
        where = f" in run {run!r}" if run else ""
        with self._lock:
            self._begin()
            try:
                if run is None:
                    names = self._read(
                        f"SELECT DISTINCT runs.name {_FROM} WHERE checkpoints.status = ?"
                        " ORDER BY runs.name LIMIT 4",
                        [CheckpointStatus.OK.value],
                    )
                    pick.one_run([n for (n,) in names])
                if resumable:
                    outcome = self._pick(
                        judged + order, [*params, *_MAY_RESUME_PARAMS], resumable=True
                    )
                else:
                    outcome = self._pick(sql + order, params)
                if outcome.row is None:
                    newest = None
                    if resumable:
                        found = self._rows(f"{sql}{order} LIMIT 1", params)
                        newest = found[0] if found else None
                    raise pick.not_found(outcome, f"ok checkpoint{where}", newest)
                return self._complete(outcome)
            finally:
                self._end()

    def _pick(
        self, sql: str, params: builtins.list[Any], *, resumable: bool = False
    ) -> pick.Outcome:
        def page(offset: int, limit: int) -> builtins.list[Any]:
            return self._rows(f"{sql} LIMIT ? OFFSET ?", [*params, limit, offset])

        def details_of(checkpoint_id: int) -> dict[str, Any]:
            rows = self._read("SELECT details FROM checkpoints WHERE id = ?", (checkpoint_id,))
            details = self._json(rows[0][0]) if rows else None
            if not isinstance(details, dict):
                return {}
            files = details.get("files")
            files = [str(f) for f in files] if isinstance(files, builtins.list) else []
            return {**details, "files": files}

        return pick.first_unchanged(page, details_of, resumable=resumable)

    def _complete(self, outcome: pick.Outcome) -> Checkpoint:
        assert outcome.row is not None
        row_id = outcome.row[0]
        values = self._metric_values([row_id])
        sources = self._read("SELECT name, source FROM metrics WHERE checkpoint_id = ?", (row_id,))
        found = pick.checkpoint(outcome, values.get(row_id, {}))
        return dataclasses.replace(found, metric_sources=dict(sources))

    def count(self) -> int:
        """Checkpoints on disk (any status but missing, removed, trashed, purged), as
        `Store.count`."""
        marks = ", ".join("?" * len(_GONE))
        with self._lock:
            rows = self._read(
                f"SELECT count(*) FROM checkpoints WHERE status NOT IN ({marks})", _GONE
            )
        return int(rows[0][0] or 0)

    def heartbeats(self) -> builtins.list[Heartbeat]:
        """The newest heartbeat of each daemon node, newest first (as `Store.heartbeats`)."""
        with self._lock:
            rows = self._read(
                "SELECT pid, host, started_at, heartbeat_at, state, node, id FROM heartbeat"
                f" ORDER BY heartbeat_at DESC, id DESC LIMIT {HEARTBEAT_ROWS}"
            )
        beats = [
            Heartbeat(p, h, s, b, dict(self._json(st) or {}), n, i) for p, h, s, b, st, n, i in rows
        ]
        return newest_per_node(beats)

    def latest_heartbeat(self) -> Heartbeat | None:
        with self._lock:
            rows = self._read(
                "SELECT pid, host, started_at, heartbeat_at, state FROM heartbeat"
                " ORDER BY heartbeat_at DESC, id DESC LIMIT 1"
            )
        if not rows:
            return None
        pid, host, started_at, heartbeat_at, state = rows[0]
        return Heartbeat(pid, host, started_at, heartbeat_at, dict(self._json(state) or {}))

    def _metric_values(
        self, ids: builtins.list[int], *, whole_table: bool = False
    ) -> dict[int, dict[str, float | None]]:
        out: dict[int, dict[str, float | None]] = {}
        sql = "SELECT checkpoint_id, name, value FROM metrics"
        chunks: builtins.list[builtins.list[int] | None] = (
            [None] if whole_table else [ids[i : i + 900] for i in range(0, len(ids), 900)]
        )
        for chunk in chunks if ids else []:
            if chunk is None:
                part = self._read(sql)
            else:
                marks = ", ".join("?" * len(chunk))
                part = self._read(f"{sql} WHERE checkpoint_id IN ({marks})", chunk)
            for checkpoint_id, name, value in part:
                finite = value is not None and math.isfinite(value)
                out.setdefault(checkpoint_id, {})[name] = value if finite else None
        return out


def _listing(
    query: ListQuery,
    in_run: Callable[[str], tuple[str, list[Any]]],
    stored: Callable[[str], str],
) -> tuple[str, list[Any]]:
    """The SQL of a listing: store_reads._filtered and _sorted, clause for clause. `in_run`:
    the dialect's run-range condition; `stored`: a local path as the catalog stores it."""
    joins: list[str] = []
    where: list[str] = []
    params: list[Any] = []
    if query.run is not None:
        condition, bounds = in_run(query.run)
        where.append(condition)
        params += bounds
    if query.root is not None:
        where.append("runs.root = ?")
        params.append(stored(query.root))
    for column, value in (("format", query.format), ("status", query.status), ("kind", query.kind)):
        if value is not None:
            where.append(f"checkpoints.{column} = ?")
            params.append(value)
    if query.status is None:  # a standby copy is the file itself: listed once, as the file
        where.append("checkpoints.status != 'standby'")
        if not query.off_disk:
            where.append(f"checkpoints.status NOT IN ({', '.join('?' * len(OFF_DISK))})")
            params += OFF_DISK
    if not query.versions:
        where.append("checkpoints.version_of IS NULL")
    for cond in query.where:
        op = _OPERATORS[cond.op]
        if cond.column is not None:
            where.append(f"checkpoints.{cond.column} {op} ?")
            params.append(cond.value)  # a number (core.query): never a path to convert
        else:
            where.append(
                "EXISTS (SELECT 1 FROM metrics WHERE metrics.checkpoint_id = checkpoints.id "
                f"AND metrics.name = ? AND metrics.value {_FINITE} AND metrics.value {op} ?)"
            )
            params += [cond.key, *_FINITE_BOUNDS, cond.value]
    column_name = COLUMN_KEYS.get(query.sort)
    if column_name is not None:
        column = f"checkpoints.{column_name}"
    elif query.sort in ("run", "format", "status", "kind"):
        column = "runs.name" if query.sort == "run" else f"checkpoints.{query.sort}"
    else:
        joins.append(
            "LEFT OUTER JOIN metrics AS sort_metric ON sort_metric.checkpoint_id = "
            "checkpoints.id AND sort_metric.name = ?"
        )
        params.insert(0, query.sort)  # the join's parameter comes before the WHERE's
        column = "sort_metric.value"
    direction = "DESC" if query.descending else "ASC"
    sql = " ".join([f"SELECT {_LIST_COLUMNS} {_FROM}", *joins])
    if where:
        sql += " WHERE " + " AND ".join(where)
    # Rows without the key sort last either way; ties are broken by id for stable output.
    sql += f" ORDER BY {column} IS NULL, {column} {direction}, checkpoints.id"
    if query.limit is not None:
        sql += " LIMIT ?"
        params.append(query.limit)
    return sql, params
