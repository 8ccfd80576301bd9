"""Catalog reads through the Store's engine (BEGIN DEFERRED), the `reads` facet: the hot reads
over it (`hot_reads`, the fast path's own SQL), one checkpoint in full (`show`), runs."""

from __future__ import annotations

import builtins
import dataclasses
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, case, select, true

from ..core.errors import NotFound
from ..core.model import Checkpoint, CheckpointStatus, Run
from ..core.runs import run_scope
from . import db, read_sql
from .hot_reads import Fetch, HotReads
from .read_sql import Statement
from .rows import LISTING_COLUMNS, to_checkpoint
from .schema import (
    ARTIFACTS,
    CHECKPOINTS,
    EVENTS,
    METRICS,
    RECORDS,
    RUNS,
    codepoint_order,
    path_codec,
)

checkpoints, metrics, runs = CHECKPOINTS, METRICS, RUNS
MAX_ID = 2**63 - 1
events, artifacts = EVENTS, ARTIFACTS

# What a listing reads, in the order `rows.to_checkpoint` unpacks it.
_TABLES = {"checkpoints": checkpoints, "runs": runs}
_LIST_COLUMNS = tuple(_TABLES[table].c[column] for table, column in LISTING_COLUMNS)
# Facts only `show` prints, kept in plain columns for queries but not on the listing model.
_SHOW_COLUMNS = (
    "keras_version",
    "backend",
    "model_class",
    "model_name",
    "iterations",
    "n_trainable_params",
    "generation",
    "first_seen_at",
    "metrics_at",
)
# What `show` prints of each of its artifacts and audit events.
_ARTIFACT_KEYS = ("kind", "path", "bytes", "codec", "hash", "created_at")
_EVENT_KEYS = ("at", "action", "state", "reason", "bytes", "actor")


class Reads(HotReads, db.Facet):
    """The catalog's reads: the hot reads (`hot_reads`: the fast path's statements and row
    shaping, sent to the driver as they are, paths converted with the codec `db.identify` gave
    this engine), one checkpoint in full, runs."""

    def __init__(self, engine: Engine) -> None:
        db.Facet.__init__(self, engine)

        @contextmanager
        def snapshot() -> Iterator[Fetch]:
            with engine.connect().execution_options(**db.READONLY) as conn:

                def fetch(statement: Statement) -> builtins.list[Sequence[Any]]:
                    sql, params = statement
                    return builtins.list(conn.exec_driver_sql(sql, tuple(params)).all())

                yield fetch

        dialect = read_sql.dialect_named(engine.dialect.name)
        HotReads.__init__(self, snapshot, dialect, path_codec(engine.dialect))

    def get(self, ref: str) -> Checkpoint:
        """A checkpoint by catalog id or by path (absolute or relative to the working folder),
        with layers, configs, artifacts and events. Several rows may have had a path (trashed,
        then a new file there): the one of the file at the path wins, else the newest record."""
        if _is_catalog_id(ref):
            condition = checkpoints.c.id == int(ref)
        elif ref.isascii() and ref.isdigit():
            raise NotFound(f"no checkpoint {ref!r} in the catalog")  # past any 64-bit id
        else:
            condition = checkpoints.c.path == os.path.abspath(ref)
        show_columns = [checkpoints.c[name] for name in _SHOW_COLUMNS]
        record = checkpoints.c.status.in_(RECORDS)
        stmt = (
            select(*_LIST_COLUMNS, checkpoints.c.details, *show_columns)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(condition)
            .order_by(case((record, 1), else_=0), checkpoints.c.id.desc())
            .limit(1)
        )
        with self._engine.connect().execution_options(**db.READONLY) as conn:
            row = conn.execute(stmt).first()
            if row is None:
                raise NotFound(f"no checkpoint {ref!r} in the catalog")
            values = _metric_values(conn, [row.id]).get(row.id, {})
            found = to_checkpoint(row[: len(_LIST_COLUMNS)], values)
            sources = conn.execute(
                select(metrics.c.name, metrics.c.source).where(metrics.c.checkpoint_id == row.id)
            ).all()
            found_artifacts = conn.execute(
                select(*(artifacts.c[k] for k in _ARTIFACT_KEYS))
                .where(artifacts.c.checkpoint_id == row.id)
                .order_by(artifacts.c.id)
            ).all()
            history = conn.execute(
                select(*(events.c[k] for k in _EVENT_KEYS))
                .where(events.c.checkpoint_id == row.id)
                .order_by(events.c.id)
            ).all()
            kept = _versions_of(conn, found.path) if found.version_of is None else []
        details = dict(row.details or {})
        details["versions"] = kept
        details.update(
            {name: row._mapping[name] for name in _SHOW_COLUMNS},
            artifacts=[dict(a._mapping) for a in found_artifacts],
        )
        details["events"] = [dict(e._mapping) for e in history]
        return dataclasses.replace(found, details=details, metric_sources=dict(sources))

    def run_keys(self) -> builtins.list[tuple[int, str, str]]:
        """(id, root, name) of every run: cheap, unlike `runs()` and its per-metric bests."""
        rows = self._read(
            select(runs.c.id, runs.c.root, runs.c.name).order_by(runs.c.root, runs.c.name)
        )
        return [(r.id, r.root, r.name) for r in rows]

    def runs(self) -> builtins.list[Run]:
        """Every run's summary, with its last save when that did not complete."""
        found = super().runs()
        failed = {(f["root"], f["run"]): f for f in self.unfinished_last_saves()}
        return [
            dataclasses.replace(r, last_save_failed=failed[(r.root, r.name)])
            if (r.root, r.name) in failed
            else r
            for r in found
        ]


def in_run(run: str) -> Any:
    """SQL: the checkpoint is in run `run` or a run below it (`core.runs`)."""
    scope = run_scope(run)
    if scope.exact is None:
        return true()
    # Both arms in one collation (code point order, PostgreSQL: COLLATE "C"), so one index on
    # runs.name in that order serves the run and the runs below it (a BitmapOr) instead of a
    # scan of every run: an equality in the database's collation cannot use such an index.
    name = codepoint_order(runs.c.name)
    return (name == scope.exact) | ((name >= scope.low) & (name < scope.high))


def _versions_of(conn: Any, path: str) -> list[dict[str, Any]]:
    """The kept versions of the file at `path`, oldest generation first (`show`)."""
    rows = conn.execute(
        select(*_LIST_COLUMNS)
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(
            checkpoints.c.version_of == path,
            checkpoints.c.status != CheckpointStatus.PURGED.value,
        )
        .order_by(checkpoints.c.generation, checkpoints.c.id)
    ).all()
    values = _metric_values(conn, [r[0] for r in rows])
    out = []
    for r in rows:
        c = to_checkpoint(r, values.get(r[0], {}))
        out.append(
            {
                "generation": c.generation,
                "path": c.path,
                "status": c.status.value,
                "current": c.status == CheckpointStatus.STANDBY,
                "epoch": c.epoch,
                "step": c.step,
                "hash": c.hash,
                "size_bytes": c.size_bytes,
                "metrics": {k: v for k, v in c.metrics.items() if v is not None},
            }
        )
    return out


def _is_catalog_id(ref: str) -> bool:
    # ASCII digits only: str.isdigit() is also true for "²" and "١", which int() refuses or
    # reads as another number; and no id is past a 64-bit column.
    return ref.isascii() and ref.isdigit() and int(ref) <= MAX_ID


def _metric_values(conn: Any, ids: list[int]) -> dict[int, dict[str, float | None]]:
    """{checkpoint id: {metric: value}} for `ids`."""
    out: dict[int, dict[str, float | None]] = {}
    stmt = select(metrics.c.checkpoint_id, metrics.c.name, metrics.c.value)
    for chunk in (ids[i : i + 900] for i in range(0, len(ids), 900)):
        for checkpoint_id, name, value in conn.execute(
            stmt.where(metrics.c.checkpoint_id.in_(chunk))
        ):
            finite = value is not None and math.isfinite(value)
            out.setdefault(checkpoint_id, {})[name] = value if finite else None
    return out
