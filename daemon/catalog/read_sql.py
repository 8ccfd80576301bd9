"""The SQL of the catalog's hot reads (listings, `best`, `latest`, metric names, version counts,
counts, heartbeats), written once: `hot_reads` runs it through the standard library's sqlite3 or
psycopg alone (`dbapi_reads`, the CLI's fast path) and through the Store's SQLAlchemy engine
alike, so a new filter or order is written here and nowhere else.

Statements are plain text with `?` markers and a list of parameters; what differs between the
databases is a `Dialect` (the driver's marker, the code point order of run-name ranges, JSON
columns as text or as values). No SQLAlchemy here: the fast path must not pay for it."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..core.health import NONFINITE
from ..core.health import PREFIX as HEALTH
from ..core.model import CheckpointStatus, Format, Kind
from ..core.query import COLUMN_KEYS, OFF_DISK, ListQuery
from ..core.resume import LEGACY_H5_RESUMES_IN, may_resume
from ..core.runs import run_scope
from . import pick
from .rows import HEARTBEAT_ROWS, LISTING_COLUMNS

Statement = tuple[str, list[Any]]

# What a listing reads, in the order `rows.to_checkpoint` unpacks it.
LIST_COLUMNS = ", ".join(f"{table}.{column}" for table, column in LISTING_COLUMNS)
CANDIDATE_COLUMNS = ", ".join(f"{table}.{column}" for table, column in pick.CANDIDATE_COLUMNS)
FROM = "FROM checkpoints JOIN runs ON runs.id = checkpoints.run_id"
_OPERATORS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "!="}
# SQL: a finite number. Values are stored so (NaN and +/-Infinity as NULL), but catalogs written
# before that hold +/-Infinity, which must not rank or match either.
FINITE = "BETWEEN ? AND ?"
FINITE_BOUNDS = (-sys.float_info.max, sys.float_info.max)
# `latest`'s order: the most training progress first; unknown iterations, epoch, step sort last.
_NEWEST_FIRST = (
    ", ".join(
        f"checkpoints.{c} IS NULL, checkpoints.{c} DESC" for c in ("iterations", "epoch", "step")
    )
    + ", checkpoints.mtime_ns DESC, checkpoints.id DESC"
)


def _may_resume() -> tuple[str, tuple[Any, ...]]:
    """`latest --resumable`'s filter: the rows `core.resume` may call resumable (it judges each
    one); asked at each query, so a format row registered later counts."""
    formats = may_resume()
    sql = (
        f"checkpoints.format IN ({', '.join('?' * len(formats))})"
        " AND checkpoints.optimizer_bytes > 0 AND (checkpoints.format != ? OR"
        " (checkpoints.kind = ?"
        f" AND ({' OR '.join(['checkpoints.keras_version LIKE ?'] * len(LEGACY_H5_RESUMES_IN))})))"
    )
    params = (
        *(f.value for f in formats),
        Format.KERAS_LEGACY_H5.value,
        Kind.FULL.value,
        *(f"{m}.%" for m in LEGACY_H5_RESUMES_IN),
    )
    return sql, params


_GONE = (
    CheckpointStatus.MISSING.value,
    CheckpointStatus.REMOVED.value,
    CheckpointStatus.TRASHED.value,
    CheckpointStatus.PURGED.value,
)
OK = CheckpointStatus.OK.value
# Where a listing (and candidate) row holds a path column (`CatalogPath` in the schema).
PATH_AT = tuple(
    i
    for i, column in enumerate(LISTING_COLUMNS)
    if column in (("checkpoints", "path"), ("runs", "root"), ("checkpoints", "version_of"))
)
IN_CHUNK = 500  # values bound in one IN list (SQLite's default limit is 999 parameters)


@dataclasses.dataclass(frozen=True)
class Dialect:
    """What differs between the databases for these statements (written with `?`)."""

    placeholder: str  # the driver's parameter marker: "?" (sqlite3) or "%s" (psycopg)
    begin: str  # a read-only transaction: one snapshot for a listing and its metrics
    # Appended to runs.name where a run's name range is compared: code point order
    # (schema.codepoint_order), so PostgreSQL's index on it serves.
    codepoint: str = ""
    json_as_text: bool = True  # JSON columns arrive as text (SQLite) or decoded (psycopg)
    # PostgreSQL's text cannot hold NUL: the Store binds U+FFFD for it (db._install_psycopg_hooks)
    text_holds_nul: bool = True

    def driver_sql(self, sql: str) -> str:
        """`sql` with the driver's parameter marker."""
        if self.placeholder == "?":
            return sql
        assert "%" not in sql, "a literal % in SQL for a %s driver"
        return sql.replace("?", self.placeholder)


SQLITE = Dialect(placeholder="?", begin="BEGIN DEFERRED")
POSTGRESQL = Dialect(
    placeholder="%s",
    begin="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    codepoint=' COLLATE "C"',
    json_as_text=False,
    text_holds_nul=False,
)


def dialect_named(name: str) -> Dialect:
    """The dialect of a database by its SQLAlchemy backend name (sqlite, postgresql)."""
    return SQLITE if name == "sqlite" else POSTGRESQL


def in_run(run: str, dialect: Dialect) -> Statement:
    """SQL: in run `run` or a run below it (`core.runs`). Both arms in one collation (code point
    order), so one index on runs.name in that order serves the run and the runs below it."""
    scope = run_scope(run)
    if scope.exact is None:
        return "1 = 1", []
    name = f"runs.name{dialect.codepoint}"
    return f"({name} = ? OR ({name} >= ? AND {name} < ?))", [scope.exact, scope.low, scope.high]


def listing(query: ListQuery, dialect: Dialect, stored: Callable[[str], str]) -> Statement:
    """The SQL of a listing; `stored`: a local path as the catalog stores it."""
    joins: list[str] = []
    where: list[str] = []
    params: list[Any] = []
    if query.run is not None:
        condition, bounds = in_run(query.run, dialect)
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
        where.append("checkpoints.status != ?")
        params.append(CheckpointStatus.STANDBY.value)
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
                f"AND metrics.name = ? AND metrics.value {FINITE} AND metrics.value {op} ?)"
            )
            params += [cond.key, *FINITE_BOUNDS, cond.value]
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
    sql = " ".join([f"SELECT {LIST_COLUMNS} {FROM}", *joins])
    if where:
        sql += " WHERE " + " AND ".join(where)
    # Rows without the key sort last either way; ties are broken by id for stable output.
    sql += f" ORDER BY {column} IS NULL, {column} {direction}, checkpoints.id"
    if query.limit is not None:
        sql += " LIMIT ?"
        params.append(query.limit)
    return sql, params


def best(
    metric: str, mode: str, run: str | None, dialect: Dialect, versions: bool = False
) -> Statement:
    """`best`'s candidates, best first: `ok` rows with a finite `metric` (our kept copies of
    rewritten files only with `versions`: they are no training moment of their own)."""
    sql = (
        f"SELECT {CANDIDATE_COLUMNS} {FROM} JOIN metrics ON metrics.checkpoint_id = "
        f"checkpoints.id AND metrics.name = ? WHERE checkpoints.status = ? AND "
        f"metrics.value {FINITE}"
    )
    scope, bounds = _scope(run, dialect, versions)
    params: list[Any] = [metric, OK, *FINITE_BOUNDS, *bounds]
    sql += scope
    order = "ASC" if mode == "min" else "DESC"
    sql += f" ORDER BY metrics.value {order}, checkpoints.mtime_ns DESC, checkpoints.id DESC"
    return sql, params


def latest(run: str | None, resumable: bool, dialect: Dialect, versions: bool = False) -> Statement:
    """`latest`'s candidates, newest first: `ok` rows (with `resumable`, those `core.resume` may
    call resumable; our kept copies only with `versions`)."""
    scope, params = _scope(run, dialect, versions)
    sql = f"SELECT {CANDIDATE_COLUMNS} {FROM} WHERE checkpoints.status = ?{scope}"
    params = [OK, *params]
    if resumable:
        condition, more = _may_resume()
        sql += f" AND {condition}"
        params += more
    return f"{sql} ORDER BY {_NEWEST_FIRST}", params


def _scope(run: str | None, dialect: Dialect, versions: bool) -> Statement:
    """`best`'s and `latest`'s candidates' scope, as ` AND ...` conditions: in `run` (or any),
    and our kept copies of rewritten files only with `versions`."""
    sql = "" if versions else " AND checkpoints.version_of IS NULL"
    if run is None:
        return sql, []
    condition, params = in_run(run, dialect)
    return f"{sql} AND {condition}", params


def same_moment(
    statement: Statement, epoch: int | None, step: int | None, value: float | None = None
) -> Statement:
    """`best`'s or `latest`'s candidates narrowed to one training moment (its epoch and step,
    and for `best` the same metric value): the files a winner ties with, in the same order."""
    sql, params = statement
    head, _, order = sql.rpartition(" ORDER BY ")
    extra: list[Any] = []
    for column, known in (("epoch", epoch), ("step", step)):
        head += f" AND checkpoints.{column} " + ("IS NULL" if known is None else "= ?")
        extra += [] if known is None else [known]
    if value is not None:
        head += " AND metrics.value = ?"
        extra.append(value)
    return f"{head} ORDER BY {order} LIMIT {MOMENT_FILES}", [*params, *extra]


MOMENT_FILES = 16  # files of one moment looked at for a stable twin


def page(statement: Statement, offset: int, limit: int) -> Statement:
    sql, params = statement
    return f"{sql} LIMIT ? OFFSET ?", [*params, limit, offset]


# Up to 4 runs with ok rows (`latest` without a run must find one).
RUNS_WITH_OK: Statement = (
    f"SELECT DISTINCT runs.name {FROM} WHERE checkpoints.status = ? ORDER BY runs.name LIMIT 4",
    [OK],
)
METRIC_NAMES: Statement = ("SELECT DISTINCT name FROM metrics", [])
# {checkpoint id: {metric: value}}: a non-finite value (of an old catalog) reads as NULL; each
# checkpoint's metrics in name order (the primary key's), on every backend and either read.
_METRIC_VALUES = "SELECT checkpoint_id, name, CASE WHEN value BETWEEN ? AND ? THEN value END"
_BY_CHECKPOINT = "ORDER BY checkpoint_id, name"
ALL_METRIC_VALUES: Statement = (f"{_METRIC_VALUES} FROM metrics {_BY_CHECKPOINT}", [*FINITE_BOUNDS])
COUNT_ALL: Statement = ("SELECT count(*) FROM checkpoints", [])
COUNT_ON_DISK: Statement = (
    f"SELECT count(*) FROM checkpoints WHERE status NOT IN ({', '.join('?' * len(_GONE))})",
    [*_GONE],
)
# Runs whose last save did not complete: an abandoned or corrupt row written after the run's
# newest ok checkpoint (keras#23609: a run whose last save failed looks like one that saved).
# CROSS JOIN: SQLite walks the runs and seeks each one's rows of those statuses by index (not a
# scan of every checkpoint: 17 ms on 100,000, for `ckpt status`, the overview, every page's state).
UNFINISHED_LAST_SAVES: Statement = (
    "SELECT runs.name, runs.root, c.path, c.status, c.reason, c.mtime_ns"
    " FROM runs CROSS JOIN checkpoints c WHERE c.run_id = runs.id AND c.status IN (?, ?)"
    " AND c.mtime_ns > COALESCE((SELECT max(o.mtime_ns) FROM checkpoints o"
    " WHERE o.run_id = c.run_id AND o.status = ?), -1)"
    " ORDER BY runs.root, runs.name, c.mtime_ns DESC, c.id DESC",
    [CheckpointStatus.ABANDONED.value, CheckpointStatus.CORRUPT.value, OK],
)
HEARTBEATS: Statement = (
    "SELECT pid, host, started_at, heartbeat_at, state, node, id FROM heartbeat"
    f" ORDER BY heartbeat_at DESC, id DESC LIMIT {HEARTBEAT_ROWS}",
    [],
)
LATEST_HEARTBEAT: Statement = (
    "SELECT pid, host, started_at, heartbeat_at, state FROM heartbeat"
    " ORDER BY heartbeat_at DESC, id DESC LIMIT 1",
    [],
)


def has_metric(name: str) -> Statement:
    return "SELECT 1 FROM metrics WHERE name = ? LIMIT 1", [name]


def metric_values(ids: Sequence[int]) -> Statement:
    marks = ", ".join("?" * len(ids))
    return f"{_METRIC_VALUES} FROM metrics WHERE checkpoint_id IN ({marks}) {_BY_CHECKPOINT}", [
        *FINITE_BOUNDS,
        *ids,
    ]


def metric_sources(checkpoint_id: int) -> Statement:
    return "SELECT name, source FROM metrics WHERE checkpoint_id = ?", [checkpoint_id]


def health_of(checkpoint_id: int) -> Statement:
    """A checkpoint's metrics `core.health.unhealthy` reads (one seek of the primary key)."""
    names = [NONFINITE, f"{HEALTH}:nan", f"{HEALTH}:inf"]
    return (
        "SELECT name, value FROM metrics WHERE checkpoint_id = ? AND name IN (?, ?, ?)",
        [checkpoint_id, *names],
    )


def details_of(checkpoint_id: int) -> Statement:
    return "SELECT details FROM checkpoints WHERE id = ?", [checkpoint_id]


def version_counts(stored_paths: Sequence[str] | None = None) -> Statement:
    """How many versions of each of these files (stored paths; None: of every file) are kept:
    standby copies and the rows of trashed or purged ones are not counted."""
    counted = (CheckpointStatus.STANDBY.value, *OFF_DISK)
    files = "IS NOT NULL" if stored_paths is None else f"IN ({', '.join('?' * len(stored_paths))})"
    return (
        f"SELECT version_of, count(*) FROM checkpoints WHERE version_of {files} AND status NOT IN "
        f"({', '.join('?' * len(counted))}) GROUP BY version_of",
        [*(stored_paths or []), *counted],
    )
