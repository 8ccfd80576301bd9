"""The catalog's hot reads (`ckpt list`, `best`, `latest`, the metric names, version counts, the
status counts and heartbeats), one definition for both ways in: `read_sql`'s statements, and the
rows they return made into `core.model` values here.

A `HotReads` runs on a `Snapshot`: a function that opens one read-only transaction and yields a
`Fetch` (statement -> rows). `dbapi_reads` gives it a plain DB-API connection (sqlite3 or psycopg:
the CLI's fast path, no SQLAlchemy); `store_reads.Reads` gives it the Store's engine. Stored paths
of named roots are converted as the Store's column types convert them (`core.root_names`):
stored -> local on every path read, local -> stored for path arguments. No SQLAlchemy here."""

from __future__ import annotations

import builtins
import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from ..core.model import Checkpoint, Heartbeat, Run
from ..core.moments import preferred_over, rewritten_in_place
from ..core.query import ListQuery
from ..core.root_names import PathCodec
from . import pick, read_sql
from .read_sql import Dialect, Statement
from .rows import cyclic_gc_paused, newest_per_node, to_checkpoint
from .run_summaries import Kept, read_runs

# Listings of more rows than these may read every metric value / count every kept version at
# once rather than by IN lists of their ids / paths.
_WHOLE_METRICS_TABLE = 4 * read_sql.IN_CHUNK
_WHOLE_VERSION_TABLE = 4 * read_sql.IN_CHUNK


class Fetch(Protocol):
    def __call__(self, statement: Statement) -> builtins.list[Sequence[Any]]: ...


Snapshot = Callable[[], AbstractContextManager[Fetch]]


class HotReads:
    """The hot reads over `snapshot` (one read-only transaction per call) on a `dialect`
    database; `codec`: the named roots whose paths are stored relative to their name."""

    def __init__(self, snapshot: Snapshot, dialect: Dialect, codec: PathCodec | None) -> None:
        self._snapshot = snapshot
        self._dialect = dialect
        self._codec = codec if codec else None
        self._runs_kept: Kept = {}  # every run's summary, read again once its revision moves

    @contextmanager
    def _reading(self) -> Iterator[Fetch]:
        """A snapshot whose fetch takes `?` statements (the driver's marker, NUL-free text
        where the database cannot hold it)."""
        dialect = self._dialect
        with self._snapshot() as fetch:

            def driver_fetch(statement: Statement) -> builtins.list[Sequence[Any]]:
                sql, params = statement
                if not dialect.text_holds_nul:
                    params = [_nul_free(p) for p in params]
                return fetch((dialect.driver_sql(sql), params))

            yield driver_fetch

    def _local_rows(self, rows: builtins.list[Sequence[Any]]) -> builtins.list[Sequence[Any]]:
        """Listing or candidate rows, their paths local (as the Store's `CatalogPath` reads)."""
        codec = self._codec
        if codec is None:
            return rows
        out: builtins.list[Sequence[Any]] = []
        for row in rows:
            values = builtins.list(row)
            for i in read_sql.PATH_AT:
                if values[i] is not None:
                    values[i] = codec.local(values[i])
            out.append(values)
        return out

    def _json(self, value: Any) -> Any:
        """A JSON column's value, its paths local (as the Store's `CatalogJSON` reads)."""
        if self._dialect.json_as_text:
            value = json.loads(value) if value is not None else None
        if value is not None and self._codec is not None:
            value = self._codec.local_tree(value)
        return value

    def _stored(self, local: str) -> str:
        return self._codec.stored(local) if self._codec is not None else local

    def list(self, query: ListQuery) -> builtins.list[Checkpoint]:
        statement = read_sql.listing(query, self._dialect, self._stored)
        with cyclic_gc_paused(), self._reading() as fetch:
            rows = self._local_rows(fetch(statement))
            ids = [r[0] for r in rows]
            values = _metric_values(fetch, ids, whole_table=_most_of_the_catalog(fetch, ids))
            empty: dict[str, float | None] = {}
            return [to_checkpoint(r, values.get(r[0], empty)) for r in rows]

    def version_counts(self, paths: builtins.list[str]) -> dict[str, int]:
        """{path: how many versions of the file at path are kept} (the ordinary views fold them
        under their file: standby copies, trashed and purged ones are not counted)."""
        if not paths:
            return {}
        with self._reading() as fetch:
            if len(paths) > _WHOLE_VERSION_TABLE:
                wanted = {self._stored(p) for p in paths}
                rows = [r for r in fetch(read_sql.version_counts()) if r[0] in wanted]
            else:
                rows = []
                for start in range(0, len(paths), read_sql.IN_CHUNK):
                    chunk = [self._stored(p) for p in paths[start : start + read_sql.IN_CHUNK]]
                    rows += fetch(read_sql.version_counts(chunk))
        codec = self._codec
        return {(codec.local(stored) if codec else stored): n for stored, n in rows}

    def metric_names(self) -> set[str]:
        """Every metric name any checkpoint in the catalog has (to name them in an error)."""
        with self._reading() as fetch:
            return {row[0] for row in fetch(read_sql.METRIC_NAMES)}

    def has_metric(self, name: str) -> bool:
        """Does any checkpoint have metric `name` (one index seek)?"""
        with self._reading() as fetch:
            return bool(fetch(read_sql.has_metric(name)))

    def best(
        self, metric: str, mode: str, run: str | None = None, *, versions: bool = False
    ) -> Checkpoint:
        """The `ok` checkpoint with the best finite `metric` whose files are unchanged (`pick`);
        a kept copy of a rewritten file only with `versions`."""
        statement = read_sql.best(metric, mode, run, self._dialect, versions)
        where = f" in run {run!r}" if run else ""
        with self._reading() as fetch:
            outcome = self._pick(fetch, statement, healthy=True)
            if outcome.row is None:
                raise pick.not_found(outcome, f"ok checkpoint{where} has metric {metric!r}")
            found = _complete(fetch, outcome)
            return self._stable(fetch, found, statement, found.metrics.get(metric), healthy=True)

    def latest(
        self, run: str | None = None, resumable: bool = False, *, versions: bool = False
    ) -> Checkpoint:
        """The newest `ok` checkpoint (the most training progress: optimizer iterations, then
        epoch, step, mtime, id) whose files are unchanged; with `resumable`, of those that can
        resume training (`core.resume`). Without `run`, the catalog must hold one run with ok
        rows."""
        where = f" in run {run!r}" if run else ""
        with self._reading() as fetch:
            if run is None:
                pick.one_run([row[0] for row in fetch(read_sql.RUNS_WITH_OK)])
            statement = read_sql.latest(run, resumable, self._dialect, versions)
            outcome = self._pick(fetch, statement, resumable=resumable, healthy=resumable)
            if outcome.row is None:
                newest = None
                if resumable:
                    every_ok = read_sql.latest(run, False, self._dialect, versions)
                    found = self._local_rows(fetch(read_sql.page(every_ok, 0, 1)))
                    newest = found[0] if found else None
                raise pick.not_found(outcome, f"ok checkpoint{where}", newest)
            winner = _complete(fetch, outcome)
            return self._stable(
                fetch, winner, statement, None, resumable=resumable, healthy=resumable
            )

    def _stable(
        self,
        fetch: Fetch,
        found: Checkpoint,
        statement: Statement,
        value: float | None,
        *,
        resumable: bool = False,
        healthy: bool = False,
    ) -> Checkpoint:
        """`found`, or where it is a file its trainer rewrites (`last.ckpt`, `best.pt`), the
        first unchanged file of the same moment (epoch, step; `value` of the metric) that is
        not: the answer a script still finds there a moment later (`preferred_over` says it)."""
        name = found.path.rsplit("/", 1)[-1]
        moment = (found.epoch, found.step)
        if not rewritten_in_place(name, found.generation) or moment == (None, None):
            return found
        twins = read_sql.same_moment(statement, found.epoch, found.step, value)
        rows = [
            row
            for row in self._local_rows(fetch(twins))
            if row[0] != found.id and not pick.rewritten(row)
        ]

        def page(offset: int, _limit: int) -> builtins.list[Sequence[Any]]:
            return rows if offset == 0 else []

        metrics_of = self._health_of(fetch) if healthy else None
        outcome = pick.first_unchanged(
            page, self._details_of(fetch), resumable=resumable, metrics_of=metrics_of
        )
        if outcome.row is None:
            return found
        stable = _complete(fetch, outcome)
        said = preferred_over(stable.path, found.path, found.epoch, found.step)
        return dataclasses.replace(stable, details={**stable.details, "preferred_over": said})

    def _pick(
        self, fetch: Fetch, statement: Statement, *, resumable: bool = False, healthy: bool = False
    ) -> pick.Outcome:
        """The winner of `statement`'s candidates; `healthy`: none whose weights the integrity
        stage found non-finite."""

        def page(offset: int, limit: int) -> builtins.list[Sequence[Any]]:
            return self._local_rows(fetch(read_sql.page(statement, offset, limit)))

        metrics_of = self._health_of(fetch) if healthy else None
        return pick.first_unchanged(
            page, self._details_of(fetch), resumable=resumable, metrics_of=metrics_of
        )

    def _health_of(self, fetch: Fetch) -> Callable[[int], dict[str, float | None]]:
        def health_of(checkpoint_id: int) -> dict[str, float | None]:
            return {str(n): v for n, v in fetch(read_sql.health_of(checkpoint_id))}

        return health_of

    def _details_of(self, fetch: Fetch) -> Callable[[int], dict[str, Any]]:
        def details_of(checkpoint_id: int) -> dict[str, Any]:
            rows = fetch(read_sql.details_of(checkpoint_id))
            details = self._json(rows[0][0]) if rows else None
            if not isinstance(details, dict):
                return {}
            files = details.get("files")
            files = [str(f) for f in files] if isinstance(files, builtins.list) else []
            return {**details, "files": files}

        return details_of

    def runs(self) -> builtins.list[Run]:
        """Every run's summary (`run_summaries`): aggregates, no row per checkpoint; those of
        the runs whose revision did not move since the last call are not read again."""
        codec = self._codec
        with cyclic_gc_paused(), self._reading() as fetch:
            runs, self._runs_kept = read_runs(
                fetch, codec.local if codec else str, self._json, self._runs_kept
            )
        return runs

    def count(self) -> int:
        """Checkpoints on disk (any status but missing, removed, trashed, purged)."""
        with self._reading() as fetch:
            rows = fetch(read_sql.COUNT_ON_DISK)
        return int(rows[0][0] or 0)

    def unfinished_last_saves(self) -> builtins.list[dict[str, Any]]:
        """Per run whose last save did not complete (abandoned or corrupt, newer than its
        newest ok checkpoint): {run, root, path, status, reason, mtime_ns} of that save."""
        with self._reading() as fetch:
            rows = fetch(read_sql.UNFINISHED_LAST_SAVES)
        local = self._codec.local if self._codec is not None else (lambda p: p)
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for name, root, path, status, reason, mtime_ns in rows:  # newest first in each run
            key = (local(root), name)
            found.setdefault(
                key,
                {
                    "run": name,
                    "root": key[0],
                    "path": local(path),
                    "status": status,
                    "reason": reason,
                    "mtime_ns": int(mtime_ns),
                },
            )
        return builtins.list(found.values())

    def heartbeats(self) -> builtins.list[Heartbeat]:
        """The newest heartbeat of each daemon node, newest first."""
        with self._reading() as fetch:
            rows = fetch(read_sql.HEARTBEATS)
        beats = [
            Heartbeat(p, h, s, b, dict(self._json(st) or {}), n, i) for p, h, s, b, st, n, i in rows
        ]
        return newest_per_node(beats)

    def latest_heartbeat(self) -> Heartbeat | None:
        with self._reading() as fetch:
            rows = fetch(read_sql.LATEST_HEARTBEAT)
        if not rows:
            return None
        pid, host, started_at, heartbeat_at, state = rows[0]
        return Heartbeat(pid, host, started_at, heartbeat_at, dict(self._json(state) or {}))


def _nul_free(value: Any) -> Any:
    return value.replace("\0", "\ufffd") if isinstance(value, str) else value


def _complete(fetch: Fetch, outcome: pick.Outcome) -> Checkpoint:
    """The winner with its metrics and where each came from."""
    assert outcome.row is not None
    row_id = outcome.row[0]
    values = _metric_values(fetch, [row_id])
    sources = fetch(read_sql.metric_sources(row_id))
    found = pick.checkpoint(outcome, values.get(row_id, {}))
    return dataclasses.replace(found, metric_sources={name: src for name, src in sources})


def _most_of_the_catalog(fetch: Fetch, ids: builtins.list[int]) -> bool:
    """Are `ids` (a listing's) at least half the catalog's rows? Then reading the whole metrics
    table once beats IN lists of its ids (100,000 rows: 0.5 s against 0.8 s)."""
    if len(ids) <= _WHOLE_METRICS_TABLE:
        return False
    return 2 * len(ids) >= int(fetch(read_sql.COUNT_ALL)[0][0])


def _metric_values(
    fetch: Fetch, ids: builtins.list[int], *, whole_table: bool = False
) -> dict[int, dict[str, float | None]]:
    """{checkpoint id: {metric: value}} for `ids` (a whole listing reads the table once)."""
    if not ids:
        return {}
    if whole_table:
        parts = [fetch(read_sql.ALL_METRIC_VALUES)]
    else:
        step = 2 * read_sql.IN_CHUNK - 100  # SQLite's 999 parameters, with the bounds
        parts = [fetch(read_sql.metric_values(ids[i : i + step])) for i in range(0, len(ids), step)]
    out: dict[int, dict[str, float | None]] = {}
    for part in parts:
        for checkpoint_id, name, value in part:
            values = out.get(checkpoint_id)
            if values is None:
                values = out[checkpoint_id] = {}
            values[name] = value
    return out
