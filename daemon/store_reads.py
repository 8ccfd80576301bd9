"""Catalog reads: listings, best-by-metric, one checkpoint in full, runs. BEGIN DEFERRED."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from sqlalchemy import Engine, Select, and_, exists, func, select

from daemon import db
from daemon.errors import NotFound
from daemon.model import Checkpoint, CheckpointStatus, Run
from daemon.query import COLUMN_KEYS, ListQuery, default_mode
from daemon.schema import ARTIFACTS, CHECKPOINTS, EVENTS, METRICS, RUNS

checkpoints, metrics, runs = CHECKPOINTS, METRICS, RUNS
events, artifacts = EVENTS, ARTIFACTS

# `details` (layers, configs) is only read by `show`: listings of 100k rows must stay cheap.
_LIST_COLUMNS = [c for c in checkpoints.c if c.name != "details"]
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
    stmt = _filtered(
        select(*_LIST_COLUMNS, runs.c.name.label("run_name"), runs.c.root.label("run_root")),
        query,
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        rows = conn.execute(stmt).all()
        by_id = _metrics_by_id(conn, [r.id for r in rows], all_rows=query.limit is None)
    return [_to_checkpoint(r, by_id.get(r.id, {})) for r in rows]


def _filtered(stmt: Select[Any], query: ListQuery) -> Select[Any]:
    stmt = stmt.join(runs, runs.c.id == checkpoints.c.run_id)
    if query.run is not None:
        stmt = stmt.where(runs.c.name == query.run)
    for column, value in (
        ("format", query.format),
        ("status", query.status),
        ("kind", query.kind),
    ):
        if value is not None:
            stmt = stmt.where(checkpoints.c[column] == value)
    for cond in query.where:
        if cond.column is not None:
            stmt = stmt.where(_OPS[cond.op](checkpoints.c[cond.column], cond.value))
        else:
            stmt = stmt.where(
                exists().where(
                    metrics.c.checkpoint_id == checkpoints.c.id,
                    metrics.c.name == cond.key,
                    _OPS[cond.op](metrics.c.value, cond.value),
                )
            )
    stmt = _sorted(stmt, query.sort, query.descending)
    return stmt.limit(query.limit) if query.limit is not None else stmt


def best(engine: Engine, metric: str, mode: str, run: str | None = None) -> Checkpoint:
    order = metrics.c.value.asc() if mode == "min" else metrics.c.value.desc()
    stmt = (
        select(*_LIST_COLUMNS, runs.c.name.label("run_name"), runs.c.root.label("run_root"))
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .join(metrics, and_(metrics.c.checkpoint_id == checkpoints.c.id, metrics.c.name == metric))
        .where(checkpoints.c.status == CheckpointStatus.OK.value, metrics.c.value.is_not(None))
        .order_by(order, checkpoints.c.mtime_ns.desc())
        .limit(1)
    )
    if run is not None:
        stmt = stmt.where(runs.c.name == run)
    with engine.connect().execution_options(**db.READONLY) as conn:
        row = conn.execute(stmt).first()
        if row is None:
            where = f" in run {run!r}" if run else ""
            raise NotFound(f"no ok checkpoint{where} has metric {metric!r}")
        found = _metrics_by_id(conn, [row.id])
    return _to_checkpoint(row, found.get(row.id, {}))


def get(engine: Engine, ref: str) -> Checkpoint:
    """A checkpoint by catalog id or by path (absolute or relative to the working folder)."""
    if ref.isdigit():
        condition = checkpoints.c.id == int(ref)
    else:
        condition = checkpoints.c.path == os.path.abspath(ref)
    stmt = (
        select(checkpoints, runs.c.name.label("run_name"), runs.c.root.label("run_root"))
        .join(runs, runs.c.id == checkpoints.c.run_id)
        .where(condition)
    )
    with engine.connect().execution_options(**db.READONLY) as conn:
        row = conn.execute(stmt).first()
        if row is None:
            raise NotFound(f"no checkpoint {ref!r} in the catalog")
        found = _metrics_by_id(conn, [row.id])
        found_artifacts = conn.execute(
            select(artifacts).where(artifacts.c.checkpoint_id == row.id).order_by(artifacts.c.id)
        ).all()
        history = conn.execute(
            select(events).where(events.c.checkpoint_id == row.id).order_by(events.c.id)
        ).all()
    details = dict(row.details or {})
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
    return dataclasses.replace(_to_checkpoint(row, found.get(row.id, {})), details=details)


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
    return [
        Run(r.name, r.root, r.n, int(r.bytes), newest.get(r.id), best.get(r.id, {})) for r in rows
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
    return stmt.order_by(column.is_(None), ordered, checkpoints.c.id)


def _metrics_by_id(
    conn: Any, ids: list[int], *, all_rows: bool = False
) -> dict[int, dict[str, tuple[float, str]]]:
    out: dict[int, dict[str, tuple[float, str]]] = {}
    if not ids:
        return out
    stmt = select(metrics.c.checkpoint_id, metrics.c.name, metrics.c.value, metrics.c.source)
    # A full listing reads the whole metrics table once instead of an IN list of 100k ids.
    chunks = [None] if all_rows else [ids[i : i + 900] for i in range(0, len(ids), 900)]
    for chunk in chunks:
        part = stmt if chunk is None else stmt.where(metrics.c.checkpoint_id.in_(chunk))
        for r in conn.execute(part):
            out.setdefault(r.checkpoint_id, {})[r.name] = (r.value, r.source)
    return out


def _to_checkpoint(r: Any, found: dict[str, tuple[float, str]]) -> Checkpoint:
    return Checkpoint(
        id=r.id,
        path=r.path,
        run=r.run_name,
        root=r.run_root,
        format=r.format,
        kind=r.kind,
        status=CheckpointStatus(r.status),
        reason=r.reason,
        size_bytes=r.size_bytes,
        mtime=r.mtime_ns / 1e9,
        inode=r.inode,
        hash=r.hash,
        indexed_at=r.indexed_at,
        epoch=r.epoch,
        step=r.step,
        weights_bytes=r.weights_bytes,
        optimizer_bytes=r.optimizer_bytes,
        optimizer=r.optimizer,
        n_params=r.n_params,
        pinned=bool(r.pinned),
        metrics={k: v for k, (v, _s) in found.items()},
        metric_sources={k: s for k, (_v, s) in found.items()},
    )


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
        .where(checkpoints.c.status == CheckpointStatus.OK.value, metrics.c.value.is_not(None))
        .order_by(checkpoints.c.mtime_ns.desc())
    ).all()
    best: dict[int, dict[str, tuple[float, str]]] = {}
    for run_id, name, value, path in rows:
        current = best.setdefault(run_id, {}).get(name)
        if current is None or _improves(value, current[0], default_mode(name)):
            best[run_id][name] = (value, path)
    return {run_id: {n: p for n, (_v, p) in by_name.items()} for run_id, by_name in best.items()}


def _improves(value: float, best: float, mode: str) -> bool:
    return value < best if mode == "min" else value > best
