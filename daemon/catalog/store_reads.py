"""Catalog reads: listings, best-by-metric, one checkpoint in full, runs. BEGIN DEFERRED."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any

from sqlalchemy import Engine, Select, and_, case, exists, func, or_, select, true

from ..core.errors import NotFound
from ..core.model import Checkpoint, CheckpointStatus, Format, Kind, Run
from ..core.query import COLUMN_KEYS, OFF_DISK, ListQuery, default_mode
from ..core.resume import LEGACY_H5_RESUMES_IN, MAY_RESUME
from ..core.runs import run_scope
from . import db, pick
from .rows import LISTING_COLUMNS, to_checkpoint
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, METRICS, RUNS, codepoint_order

checkpoints, metrics, runs = CHECKPOINTS, METRICS, RUNS
MAX_ID = 2**63 - 1
events, artifacts = EVENTS, ARTIFACTS

# What a listing reads, in the order `rows.to_checkpoint` unpacks it.
_TABLES = {"checkpoints": checkpoints, "runs": runs}
_LIST_COLUMNS = tuple(_TABLES[table].c[column] for table, column in LISTING_COLUMNS)
_CANDIDATE_COLUMNS = tuple(_TABLES[t].c[column] for t, column in pick.CANDIDATE_COLUMNS)
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
_OPS = {
    "<": lambda c, v: c < v,
    "<=": lambda c, v: c <= v,
    ">": lambda c, v: c > v,
    ">=": lambda c, v: c >= v,
    "==": lambda c, v: c == v,
    "!=": lambda c, v: c != v,
}


def list_checkpoints(engine: Engine, query: ListQuery) -> list[Checkpoint]:
    stmt = _filtered(select(*_LIST_COLUMNS), query)
    with engine.connect().execution_options(**db.READONLY) as conn:
        rows = conn.execute(stmt).all()
        # Reading the whole metrics table once beats an IN list only for an unfiltered listing.
        whole = query == ListQuery(sort=query.sort, descending=query.descending)
        values = _metric_values(conn, [r[0] for r in rows], whole_table=whole)
    return [to_checkpoint(r, values.get(r[0], {})) for r in rows]


def _filtered(stmt: Select[Any], query: ListQuery) -> Select[Any]:
    stmt = stmt.join(runs, runs.c.id == checkpoints.c.run_id)
    if query.run is not None:
        stmt = stmt.where(in_run(query.run))
    if query.root is not None:
        stmt = stmt.where(runs.c.root == query.root)
    for column, value in (
        ("format", query.format),
        ("status", query.status),
        ("kind", query.kind),
    ):
        if value is not None:
            stmt = stmt.where(checkpoints.c[column] == value)
    if query.status is None:  # a standby copy is the file itself: listed once, as the file
        stmt = stmt.where(checkpoints.c.status != CheckpointStatus.STANDBY.value)
        if not query.off_disk:
            stmt = stmt.where(checkpoints.c.status.not_in(OFF_DISK))
    if not query.versions:
        stmt = stmt.where(checkpoints.c.version_of.is_(None))
    for cond in query.where:
        if cond.column is not None:
            stmt = stmt.where(_OPS[cond.op](checkpoints.c[cond.column], cond.value))
        else:
            stmt = stmt.where(
                exists().where(
                    metrics.c.checkpoint_id == checkpoints.c.id,
                    metrics.c.name == cond.key,
                    _finite(metrics.c.value),
                    _OPS[cond.op](metrics.c.value, cond.value),
                )
            )
    stmt = _sorted(stmt, query.sort, query.descending)
    return stmt.limit(query.limit) if query.limit is not None else stmt


def version_counts(engine: Engine, paths: list[str]) -> dict[str, int]:
    """{path: how many versions of the file at path are kept} (the ordinary views fold them
    under their file: standby copies, trashed and purged ones are not counted)."""
    counted = (CheckpointStatus.STANDBY.value, *OFF_DISK)
    out: dict[str, int] = {}
    with engine.connect().execution_options(**db.READONLY) as conn:
        for start in range(0, len(paths), 500):
            chunk = paths[start : start + 500]
            rows = conn.execute(
                select(checkpoints.c.version_of, func.count())
                .where(checkpoints.c.version_of.in_(chunk), checkpoints.c.status.not_in(counted))
                .group_by(checkpoints.c.version_of)
            )
            out.update({path: n for path, n in rows})
    return out


def metric_names(engine: Engine) -> set[str]:
    """Every metric name any checkpoint in the catalog has (to name them in an error)."""
    with engine.connect().execution_options(**db.READONLY) as conn:
        return set(conn.execute(select(metrics.c.name).distinct()).scalars())


def has_metric(engine: Engine, name: str) -> bool:
    """Does any checkpoint have metric `name` (one index seek)?"""
    with engine.connect().execution_options(**db.READONLY) as conn:
        found = conn.execute(select(metrics.c.checkpoint_id).where(metrics.c.name == name).limit(1))
        return found.first() is not None


def best(engine: Engine, metric: str, mode: str, run: str | None = None) -> Checkpoint:
    """The `ok` checkpoint with the best finite `metric` whose files are unchanged (`pick`)."""
    order = metrics.c.value.asc() if mode == "min" else metrics.c.value.desc()
    stmt = (
        select(*_CANDIDATE_COLUMNS)
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .join(metrics, and_(metrics.c.checkpoint_id == checkpoints.c.id, metrics.c.name == metric))
        .where(checkpoints.c.status == CheckpointStatus.OK.value, _finite(metrics.c.value))
        .order_by(order, checkpoints.c.mtime_ns.desc(), checkpoints.c.id.desc())
    )
    if run is not None:
        stmt = stmt.where(in_run(run))
    where = f" in run {run!r}" if run else ""
    with engine.connect().execution_options(**db.READONLY) as conn:
        outcome = _pick(conn, stmt)
        if outcome.row is None:
            raise pick.not_found(outcome, f"ok checkpoint{where} has metric {metric!r}")
        return _complete(conn, outcome)


def latest(engine: Engine, run: str | None = None, resumable: bool = False) -> Checkpoint:
    """The newest `ok` checkpoint (the most training progress: optimizer iterations, then epoch,
    step, mtime, id) whose files are unchanged; with `resumable`, of those that can resume
    training (`core.resume`). Without `run`, the catalog must hold one run with ok rows."""
    stmt = _newest_first(select(*_CANDIDATE_COLUMNS).join(runs, runs.c.id == checkpoints.c.run_id))
    stmt = stmt.where(checkpoints.c.status == CheckpointStatus.OK.value)
    if run is not None:
        stmt = stmt.where(in_run(run))
    judged = stmt.where(_may_resume())
    with engine.connect().execution_options(**db.READONLY) as conn:
        if run is None:
            pick.one_run(conn.execute(_RUNS_WITH_OK).scalars().all())
        outcome = _pick(conn, judged if resumable else stmt, resumable=resumable)
        if outcome.row is None:
            where = f" in run {run!r}" if run else ""
            newest = conn.execute(stmt.limit(1)).first() if resumable else None
            raise pick.not_found(outcome, f"ok checkpoint{where}", newest)
        return _complete(conn, outcome)


def _may_resume() -> Any:
    """SQL: the rows `core.resume` may call resumable (it judges each one that passes)."""
    legacy = checkpoints.c.format == Format.KERAS_LEGACY_H5.value
    resuming_keras = or_(
        *(checkpoints.c.keras_version.like(f"{m}.%") for m in LEGACY_H5_RESUMES_IN)
    )
    return and_(
        checkpoints.c.format.in_([f.value for f in MAY_RESUME]),
        checkpoints.c.optimizer_bytes > 0,
        or_(~legacy, and_(checkpoints.c.kind == Kind.FULL.value, resuming_keras)),
    )


def _newest_first(stmt: Select[Any]) -> Select[Any]:
    keys: list[Any] = []
    for column in (checkpoints.c.iterations, checkpoints.c.epoch, checkpoints.c.step):
        keys += [column.is_(None), column.desc()]  # unknown sorts after known, on any database
    return stmt.order_by(*keys, checkpoints.c.mtime_ns.desc(), checkpoints.c.id.desc())


_RUNS_WITH_OK = (
    select(runs.c.name)
    .join(checkpoints, checkpoints.c.run_id == runs.c.id)
    .where(checkpoints.c.status == CheckpointStatus.OK.value)
    .group_by(runs.c.name)
    .order_by(runs.c.name)
    .limit(4)
)


def _pick(conn: Any, stmt: Select[Any], *, resumable: bool = False) -> pick.Outcome:
    def page(offset: int, limit: int) -> list[Any]:
        return list(conn.execute(stmt.offset(offset).limit(limit)).all())

    def details_of(checkpoint_id: int) -> dict[str, Any]:
        details = conn.execute(
            select(checkpoints.c.details).where(checkpoints.c.id == checkpoint_id)
        ).scalar()
        return dict(details) if isinstance(details, dict) else {}

    return pick.first_unchanged(page, details_of, resumable=resumable)


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


def _finite(value: Any) -> Any:
    """SQL: `value` is a finite number. Values are stored so (NaN and +/-Infinity as NULL), but
    catalogs written before that hold +/-Infinity, which must not rank or match either."""
    return value.between(-sys.float_info.max, sys.float_info.max)


def _complete(conn: Any, found: Any) -> Checkpoint:
    """One checkpoint (a listing row, or a `pick` outcome with its details) with its metrics
    and where each came from."""
    if isinstance(found, pick.Outcome):
        assert found.row is not None
        row_id = found.row[0]
        values = _metric_values(conn, [row_id])
        checkpoint = pick.checkpoint(found, values.get(row_id, {}))
    else:
        row_id = found[0]
        values = _metric_values(conn, [row_id])
        checkpoint = to_checkpoint(found, values.get(row_id, {}))
    return dataclasses.replace(checkpoint, metric_sources=_metric_sources(conn, row_id))


def get(engine: Engine, ref: str) -> Checkpoint:
    """A checkpoint by catalog id or by path (absolute or relative to the working folder).
    Several rows may have had a path (trashed, then a new file there): the one of the file at
    the path wins, else the newest record."""
    if _is_catalog_id(ref):
        condition = checkpoints.c.id == int(ref)
    elif ref.isascii() and ref.isdigit():
        raise NotFound(f"no checkpoint {ref!r} in the catalog")  # past any 64-bit id
    else:
        condition = checkpoints.c.path == os.path.abspath(ref)
    show_columns = [checkpoints.c[name] for name in _SHOW_COLUMNS]
    record = checkpoints.c.status.in_(
        (CheckpointStatus.TRASHED.value, CheckpointStatus.PURGED.value)
    )
    stmt = (
        select(*_LIST_COLUMNS, checkpoints.c.details, *show_columns)
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(condition)
        .order_by(case((record, 1), else_=0), checkpoints.c.id.desc())
        .limit(1)
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        row = conn.execute(stmt).first()
        if row is None:
            raise NotFound(f"no checkpoint {ref!r} in the catalog")
        found = _complete(conn, row[: len(_LIST_COLUMNS)])
        found_artifacts = conn.execute(
            select(artifacts).where(artifacts.c.checkpoint_id == row.id).order_by(artifacts.c.id)
        ).all()
        history = conn.execute(
            select(events).where(events.c.checkpoint_id == row.id).order_by(events.c.id)
        ).all()
        kept = _versions_of(conn, found.path) if found.version_of is None else []
    details = dict(row.details or {})
    details["versions"] = kept
    details.update(
        {name: row._mapping[name] for name in _SHOW_COLUMNS},
        artifacts=[_artifact_json(a) for a in found_artifacts],
    )
    details["events"] = [
        {
            "at": e.at,
            "action": e.action,
            "state": e.state,
            "reason": e.reason,
            "bytes": e.bytes,
            "actor": e.actor,
        }
        for e in history
    ]
    return dataclasses.replace(found, details=details)


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


def list_runs(engine: Engine) -> list[Run]:
    stmt = (
        select(
            runs.c.id,
            runs.c.name,
            runs.c.root,
            func.count(checkpoints.c.id).label("n"),
            func.coalesce(func.sum(checkpoints.c.size_bytes), 0).label("bytes"),
            func.max(checkpoints.c.mtime_ns).label("newest_mtime"),
        )
        .join(
            checkpoints,
            and_(
                checkpoints.c.run_id == runs.c.id,
                checkpoints.c.status == CheckpointStatus.OK.value,
            ),
            isouter=True,
        )
        .group_by(runs.c.id, runs.c.name, runs.c.root)
        .order_by(runs.c.root, runs.c.name)
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        rows = conn.execute(stmt).all()
        newest = _newest_paths(conn)
        best = _best_paths(conn)
        derived = {r.id: r.details or {} for r in conn.execute(select(runs.c.id, runs.c.details))}
    return [
        Run(
            r.name,
            r.root,
            r.n,
            int(r.bytes),
            newest.get(r.id),
            best.get(r.id, {}),
            r.id,
            naming=list(derived.get(r.id, {}).get("naming") or []),
            steps_per_epoch=derived.get(r.id, {}).get("steps_per_epoch"),
            evidence=list(derived.get(r.id, {}).get("evidence") or []),
            newest_mtime_ns=r.newest_mtime,
        )
        for r in rows
    ]


def _artifact_json(a: Any) -> dict[str, Any]:
    return {
        "kind": a.kind,
        "path": a.path,
        "bytes": a.bytes,
        "codec": a.codec,
        "hash": a.hash,
        "created_at": a.created_at,
    }


def _sorted(stmt: Select[Any], key: str, descending: bool) -> Select[Any]:
    column_name = COLUMN_KEYS.get(key)
    if column_name is not None:
        column: Any = checkpoints.c[column_name]
    elif key in ("run", "format", "status", "kind"):
        column = runs.c.name if key == "run" else checkpoints.c[key]
    else:
        sort_metric = metrics.alias("sort_metric")
        stmt = stmt.join(
            sort_metric,
            and_(sort_metric.c.checkpoint_id == checkpoints.c.id, sort_metric.c.name == key),
            isouter=True,
        )
        column = sort_metric.c.value
    ordered = column.desc() if descending else column.asc()
    # Rows without the key sort last either way; ties are broken by id for stable output.
    keys = [ordered, checkpoints.c.id]
    if getattr(column, "nullable", True):
        keys.insert(0, column.is_(None))
    return stmt.order_by(*keys)


def _metric_values(
    conn: Any, ids: list[int], *, whole_table: bool = False
) -> dict[int, dict[str, float | None]]:
    """{checkpoint id: {metric: value}} for `ids` (a full listing reads the table once)."""
    out: dict[int, dict[str, float | None]] = {}
    stmt = select(metrics.c.checkpoint_id, metrics.c.name, metrics.c.value)
    chunks = [None] if whole_table else [ids[i : i + 900] for i in range(0, len(ids), 900)]
    for chunk in chunks if ids else []:
        part = stmt if chunk is None else stmt.where(metrics.c.checkpoint_id.in_(chunk))
        for checkpoint_id, name, value in conn.execute(part):
            finite = value is not None and math.isfinite(value)
            out.setdefault(checkpoint_id, {})[name] = value if finite else None
    return out


def _metric_sources(conn: Any, checkpoint_id: int) -> dict[str, str]:
    stmt = select(metrics.c.name, metrics.c.source).where(metrics.c.checkpoint_id == checkpoint_id)
    return {name: source for name, source in conn.execute(stmt)}


def _newest_paths(conn: Any) -> dict[int, str]:
    ranked = (
        select(
            checkpoints.c.run_id,
            checkpoints.c.path,
            func.row_number()
            .over(partition_by=checkpoints.c.run_id, order_by=checkpoints.c.mtime_ns.desc())
            .label("rank"),
        )
        .where(checkpoints.c.status == CheckpointStatus.OK.value)
        .subquery()
    )
    return dict(
        conn.execute(select(ranked.c.run_id, ranked.c.path).where(ranked.c.rank == 1)).all()
    )


def _best_paths(conn: Any) -> dict[int, dict[str, str]]:
    """Per run, per metric name, the path of the best `ok` checkpoint (mode as Keras's auto)."""
    rows = conn.execute(
        select(checkpoints.c.run_id, metrics.c.name, metrics.c.value, checkpoints.c.path)
        .join(checkpoints, checkpoints.c.id == metrics.c.checkpoint_id)
        .where(checkpoints.c.status == CheckpointStatus.OK.value, _finite(metrics.c.value))
        .order_by(checkpoints.c.mtime_ns.desc())
    ).all()
    best: dict[int, dict[str, tuple[float, str]]] = {}
    modes: dict[str, str] = {}  # a name's mode decided once, not once per row (100k rows)
    for run_id, name, value, path in rows:
        current = best.setdefault(run_id, {}).get(name)
        mode = modes.get(name) or modes.setdefault(name, default_mode(name))
        if current is None or _improves(value, current[0], mode):
            best[run_id][name] = (value, path)
    return {run_id: {n: p for n, (_v, p) in by_name.items()} for run_id, by_name in best.items()}


def _improves(value: float, best: float, mode: str) -> bool:
    return value < best if mode == "min" else value > best
