"""Every read and write of the catalog. Rows become `daemon.model` values before they leave."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import socket
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Engine,
    Select,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)

from daemon import db
from daemon.errors import NotFound
from daemon.model import (
    Checkpoint,
    CheckpointStatus,
    FileStat,
    IndexRecord,
    MetricValue,
    Run,
)
from daemon.query import ListQuery
from daemon.schema import ArtifactRow, CheckpointRow, EventRow, MetricRow, RunRow
from daemon.units import iso_utc

checkpoints = CheckpointRow.__table__
metrics = MetricRow.__table__
runs = RunRow.__table__
events = EventRow.__table__
artifacts = ArtifactRow.__table__

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


def utc_now() -> str:
    return iso_utc(dt.datetime.now(dt.UTC).timestamp())


def actor() -> str:
    """Who acts, for the audit log: `user@host` of this process."""
    return f"{_user()}@{socket.gethostname()}"


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


@dataclasses.dataclass(frozen=True)
class Known:
    """What the catalog remembers of a path: enough to decide whether to read it again."""

    id: int
    stat: FileStat
    status: CheckpointStatus
    generation: int
    hash: str | None
    metrics_at: str | None


class Store:
    def __init__(self, url: str, *, may_migrate: bool = False) -> None:
        self.url = url
        self.engine: Engine = db.make_engine(url)
        db.ensure_schema(url, self.engine, may_migrate=may_migrate)

    def close(self) -> None:
        self.engine.dispose()

    # ---- writes (one short BEGIN IMMEDIATE transaction each) ----

    def known_under(self, root: str) -> dict[str, Known]:
        query = (
            select(
                checkpoints.c.id,
                checkpoints.c.path,
                checkpoints.c.size_bytes,
                checkpoints.c.mtime_ns,
                checkpoints.c.inode,
                checkpoints.c.status,
                checkpoints.c.generation,
                checkpoints.c.hash,
            )
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root == root)
        )
        with self.engine.connect().execution_options(**db.READONLY) as conn:
            return {
                r.path: Known(
                    r.id,
                    FileStat(r.size_bytes, r.mtime_ns, r.inode),
                    CheckpointStatus(r.status),
                    r.generation,
                    r.hash,
                    r.metrics_at,
                )
                for r in conn.execute(query)
            }

    def record(self, rec: IndexRecord, *, actor_name: str, at: str) -> int:
        """Insert or update the row for `rec.path`; replace its metrics; log an event.

        `at` is when the scan started: metrics files changed after it are re-read next time.
        """
        now = utc_now()
        with self.engine.begin() as conn:
            run_id = self._run_id(conn, rec.root, rec.run, now)
            row = conn.execute(
                select(
                    checkpoints.c.id,
                    checkpoints.c.hash,
                    checkpoints.c.generation,
                    checkpoints.c.status,
                ).where(checkpoints.c.path == rec.path)
            ).first()
            values = _row_values(rec, now)
            values["metrics_at"] = at
            if row is None:
                values.update(run_id=run_id, first_seen_at=now, generation=1, pinned=False)
                ckpt_id = conn.execute(insert(checkpoints).values(**values)).inserted_primary_key[0]
            else:
                ckpt_id = row.id
                rewritten = row.hash is not None and rec.hash is not None and row.hash != rec.hash
                values.update(run_id=run_id, generation=row.generation + int(rewritten))
                conn.execute(
                    update(checkpoints).where(checkpoints.c.id == ckpt_id).values(**values)
                )
            _replace_metrics(conn, ckpt_id, rec.metrics)
            unchanged = row is not None and row.status == rec.status and row.hash == rec.hash
            if not unchanged:
                self._event(
                    conn,
                    now,
                    str(rec.status) if rec.status != "ok" else "indexed",
                    ckpt_id,
                    rec.path,
                    rec.reason,
                    rec.stat.size,
                    actor_name,
                )
            return int(ckpt_id)

    def update_metrics(
        self,
        ckpt_id: int,
        epoch: int | None,
        step: int | None,
        values: Sequence[MetricValue],
        *,
        at: str,
    ) -> None:
        """New metrics for an unchanged checkpoint (a CSVLogger row written after the save)."""
        with self.engine.begin() as conn:
            row = conn.execute(
                select(checkpoints.c.details).where(checkpoints.c.id == ckpt_id)
            ).first()
            details = dict(row.details or {}) if row else {}
            details["metric_sources"] = {m.name: m.source for m in _dedupe(values)}
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id == ckpt_id)
                .values(epoch=epoch, step=step, metrics_at=at, details=details)
            )
            _replace_metrics(conn, ckpt_id, values)

    def mark_missing(self, ckpt_ids: Iterable[int], reason: str, *, actor_name: str) -> int:
        ids = list(ckpt_ids)
        if not ids:
            return 0
        now = utc_now()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(checkpoints.c.id, checkpoints.c.path).where(checkpoints.c.id.in_(ids))
            ).all()
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id.in_(ids))
                .values(status=CheckpointStatus.MISSING.value, reason=reason)
            )
            for r in rows:
                self._event(conn, now, "missing", r.id, r.path, reason, None, actor_name)
        return len(rows)

    def _run_id(self, conn: Any, root: str, name: str, now: str) -> int:
        found = conn.execute(
            select(runs.c.id).where(runs.c.root == root, runs.c.name == name)
        ).scalar()
        if found is not None:
            return int(found)
        return int(
            conn.execute(
                insert(runs).values(root=root, name=name, created_at=now)
            ).inserted_primary_key[0]
        )

    @staticmethod
    def _event(
        conn: Any,
        at: str,
        action: str,
        ckpt_id: int | None,
        path: str,
        reason: str | None,
        size: int | None,
        actor_name: str,
    ) -> None:
        conn.execute(
            insert(events).values(
                at=at,
                action=action,
                state="done",
                checkpoint_id=ckpt_id,
                path=path,
                reason=reason,
                bytes=size,
                actor=actor_name,
            )
        )

    # ---- reads (BEGIN DEFERRED) ----

    def list(self, query: ListQuery) -> list[Checkpoint]:
        stmt = self._filtered(
            select(*_LIST_COLUMNS, runs.c.name.label("run_name"), runs.c.root.label("run_root")),
            query,
        )
        with self.engine.connect().execution_options(**db.READONLY) as conn:
            rows = conn.execute(stmt).all()
            by_id = _metrics_by_id(conn, [r.id for r in rows], all_rows=query.limit is None)
        return [_to_checkpoint(r, by_id.get(r.id, {})) for r in rows]

    def _filtered(self, stmt: Select[Any], query: ListQuery) -> Select[Any]:
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

    def best(self, metric: str, mode: str, run: str | None = None) -> Checkpoint:
        order = metrics.c.value.asc() if mode == "min" else metrics.c.value.desc()
        stmt = (
            select(*_LIST_COLUMNS, runs.c.name.label("run_name"), runs.c.root.label("run_root"))
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .join(
                metrics, and_(metrics.c.checkpoint_id == checkpoints.c.id, metrics.c.name == metric)
            )
            .where(checkpoints.c.status == CheckpointStatus.OK.value, metrics.c.value.is_not(None))
            .order_by(order, checkpoints.c.mtime_ns.desc())
            .limit(1)
        )
        if run is not None:
            stmt = stmt.where(runs.c.name == run)
        with self.engine.connect().execution_options(**db.READONLY) as conn:
            row = conn.execute(stmt).first()
            if row is None:
                where = f" in run {run!r}" if run else ""
                raise NotFound(f"no ok checkpoint{where} has metric {metric!r}")
            found = _metrics_by_id(conn, [row.id])
        return _to_checkpoint(row, found.get(row.id, {}))

    def get(self, ref: str) -> Checkpoint:
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
        with self.engine.connect().execution_options(**db.READONLY) as conn:
            row = conn.execute(stmt).first()
            if row is None:
                raise NotFound(f"no checkpoint {ref!r} in the catalog")
            found = _metrics_by_id(conn, [row.id])
            found_artifacts = conn.execute(
                select(artifacts)
                .where(artifacts.c.checkpoint_id == row.id)
                .order_by(artifacts.c.id)
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

    def runs(self) -> list[Run]:
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
        with self.engine.connect().execution_options(**db.READONLY) as conn:
            rows = conn.execute(stmt).all()
            newest = _newest_paths(conn)
            best = _best_paths(conn)
        return [
            Run(r.name, r.root, r.n, int(r.bytes), newest.get(r.id), best.get(r.id, {}))
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


def _replace_metrics(conn: Any, ckpt_id: int, values: Sequence[MetricValue]) -> None:
    conn.execute(delete(metrics).where(metrics.c.checkpoint_id == ckpt_id))
    rows = [
        {
            "checkpoint_id": ckpt_id,
            "name": m.name,
            "source": m.source,
            # SQLite stores NaN as NULL anyway; say so explicitly, portably.
            "value": None if math.isnan(m.value) else m.value,
        }
        for m in _dedupe(values)
    ]
    if rows:
        conn.execute(insert(metrics), rows)


def _row_values(rec: IndexRecord, now: str) -> dict[str, Any]:
    info = rec.info
    opt = info.optimizer if info else None
    values: dict[str, Any] = {
        "path": rec.path,
        "status": rec.status.value,
        "reason": rec.reason,
        "size_bytes": rec.stat.size,
        "mtime_ns": rec.stat.mtime_ns,
        "inode": rec.stat.inode,
        "hash": rec.hash,
        "epoch": rec.epoch,
        "step": rec.step,
        "indexed_at": now if rec.status == CheckpointStatus.OK else None,
        "format": info.format.value if info else None,
        "kind": info.kind.value if info else None,
        "weights_bytes": info.weights_bytes if info else None,
        "optimizer_bytes": opt.state_bytes if opt else (0 if info else None),
        "optimizer": (opt.class_name or opt.name) if opt else None,
        "iterations": opt.iterations if opt else None,
        "n_params": info.n_params if info else None,
        "n_trainable_params": info.n_trainable_params if info else None,
        "model_class": info.model_class if info else None,
        "model_name": info.model_name if info else None,
        "keras_version": info.keras_version if info else None,
        "backend": info.backend if info else None,
    }
    values["details"] = _details(rec)
    return values


def _details(rec: IndexRecord) -> dict[str, Any]:
    info = rec.info
    details: dict[str, Any] = {
        "notes": list(rec.notes) + (list(info.notes) if info else []),
        "metric_sources": {m.name: m.source for m in _dedupe(rec.metrics)},
    }
    if rec.files:
        details["files"] = list(rec.files)
    if info is None:
        return details
    opt = info.optimizer
    details.update(
        layers=[dataclasses.asdict(layer) for layer in info.layers],
        optimizer_config=opt.config if opt else None,
        optimizer_name=opt.name if opt else None,
        optimizer_variables=opt.n_variables if opt else 0,
        learning_rate=opt.learning_rate if opt else None,
        training_config=info.training_config,
        signatures=list(info.signatures),
    )
    return details


def _dedupe(values: Sequence[MetricValue]) -> list[MetricValue]:
    """The first value per name wins (callers order by precedence)."""
    seen: dict[str, MetricValue] = {}
    for m in values:
        seen.setdefault(m.name, m)
    return list(seen.values())


def _sorted(stmt: Select[Any], key: str, descending: bool) -> Select[Any]:
    from daemon.query import COLUMN_KEYS

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
    from daemon.query import default_mode

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
