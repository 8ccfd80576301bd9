"""The pipeline's durable queue in the catalog (`stage_jobs`): a job per (checkpoint
generation, stage), made once; claimed by one daemon at a time under a lease with a fencing
token (SQLite: the claim's BEGIN IMMEDIATE serializes claimers; PostgreSQL: `FOR UPDATE SKIP
LOCKED`, so daemons on many hosts share the queue without waiting on each other's rows); a job
whose holder stopped renewing is taken over once its lease expired, never while it is live. A
result is recorded only by the holder of the job's current token, so a daemon that lost its job
(stopped, then resumed) can never record a second result."""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, and_, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from ..core.pipeline import OPEN_STATES
from ..fs import procfs
from . import change_feed, db
from .audit import iso
from .rows import to_record
from .schema import CHECKPOINTS, METRICS, RUNS, STAGE_JOBS

jobs, checkpoints, metrics = STAGE_JOBS, CHECKPOINTS, METRICS
# What a pass over the queue may meet on a busy, locked or full catalog: the caller tries again.
QUEUE_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError,)
OUTPUT_MAX = 16_384  # the tail of a job's output kept in the catalog
EXPIRED = "1970-01-01T00:00:00.000Z"  # a lease set to this is free


@dataclass(frozen=True)
class StageJob:
    id: int
    checkpoint_id: int
    generation: str
    stage: str
    state: str
    attempts: int
    path: str
    run: str
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    created_at: str | None = None
    token: int = 0
    holder: str | None = None
    output: str | None = None
    result: dict[str, Any] | None = None


class StageJobs(db.Facet):
    """The queue, built from the catalog's engine (a facet: the pipeline takes only this)."""

    def without_jobs(
        self, stages: Sequence[str], limit: int = 200, skip: Mapping[int, str] | None = None
    ) -> builtins.list[int]:
        """Ids of ok checkpoints (kept versions aside) lacking a job of some stage for their
        present bytes (hash): the ones the pipeline has to look at, the newest first (a new
        checkpoint never waits behind a backlog). `skip`: {id: hash} to leave out while their
        bytes are those (checkpoints waiting for a stage they need)."""
        if not stages:
            return []
        have = (
            select(func.count())
            .select_from(jobs)
            .where(
                jobs.c.checkpoint_id == checkpoints.c.id,
                jobs.c.generation == checkpoints.c.hash,
                jobs.c.stage.in_(stages),
            )
            .scalar_subquery()
        )
        stmt = (
            select(checkpoints.c.id)
            .where(
                checkpoints.c.status == "ok",
                checkpoints.c.version_of.is_(None),
                checkpoints.c.hash.is_not(None),
                have < len(stages),
            )
            .order_by(checkpoints.c.id.desc())
            .limit(limit + len(skip or {}))
        )
        with self._engine.connect() as conn:
            found = conn.execute(stmt.add_columns(checkpoints.c.hash)).all()
        skip = skip or {}
        return [i for i, digest in found if skip.get(i) != digest][:limit]

    def make(
        self,
        wanted: Iterable[tuple[int, str, str]],
        *,
        state: str = "pending",
        error: str | None = None,
    ) -> int:
        """Jobs for (checkpoint id, generation, stage), each made once: a second maker (another
        daemon, a second pass) changes nothing. `state`: pending, or a decision made at once
        (skipped, cancelled, with `error` saying why). Returns how many were new."""
        rows = [{"checkpoint_id": c, "generation": g, "stage": s} for c, g, s in wanted]
        if not rows:
            return 0
        made = 0
        with self._engine.begin() as conn:
            at = iso(db.clock(conn))
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            for row in rows:
                stmt = dialect.insert(jobs).values(
                    **row,
                    state=state,
                    error=error,
                    attempts=0,
                    not_before=at,
                    created_at=at,
                    token=0,
                )
                made += len(conn.execute(stmt.on_conflict_do_nothing().returning(jobs.c.id)).all())
            if made:
                change_feed.announce(conn)
        return made

    def claim(
        self, stages: Sequence[str], holder: str, ttl_seconds: float, limit: int = 1
    ) -> builtins.list[StageJob]:
        """Take up to `limit` runnable jobs of `stages`: pending and due, or running under a
        lease that expired (its daemon died or stopped). Each taken job's token moves on."""
        if not stages or limit <= 0:
            return []
        with self._engine.begin() as conn:
            moment = db.clock(conn)
            now = iso(moment)
            runnable = or_(
                and_(jobs.c.state == "pending", jobs.c.not_before <= now),
                and_(jobs.c.state == "running", jobs.c.expires_at < now),
            )
            stmt = (
                select(jobs.c.id)
                .where(jobs.c.stage.in_(stages), runnable)
                .order_by(jobs.c.not_before, jobs.c.id)
                .limit(limit)
            )
            if conn.dialect.name == "postgresql":
                stmt = stmt.with_for_update(skip_locked=True)
            ids = [row[0] for row in conn.execute(stmt)]
            if not ids:
                return []
            conn.execute(
                update(jobs).where(jobs.c.id.in_(ids)).values(_taken(holder, moment, ttl_seconds))
            )
            return self._jobs(conn, jobs.c.id.in_(ids))

    def claim_one(self, job_id: int, holder: str, ttl_seconds: float) -> StageJob | None:
        """Take job `job_id` if it is pending (`ckpt stage run`): None if another has it."""
        with self._engine.begin() as conn:
            done = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state == "pending")
                .values(_taken(holder, db.clock(conn), ttl_seconds))
            )
            if done.rowcount != 1:
                return None
            return self._jobs(conn, jobs.c.id == job_id)[0]

    def free_dead_holders(self, host: str) -> int:
        """Running jobs whose holder was a process of this host that is gone (a daemon
        SIGKILLed, its child killed with it): free at once, as a run's lease is, rather than
        when their lease expires. Returns how many."""
        with self._engine.begin() as conn:
            held = conn.execute(
                select(jobs.c.id, jobs.c.holder).where(
                    jobs.c.state == "running", jobs.c.holder.startswith(f"{host}:")
                )
            ).all()
            dead = [
                job_id
                for job_id, holder in held
                if holder.rsplit(":", 1)[1].isdigit()
                and not procfs.pid_alive(int(holder.rsplit(":", 1)[1]))
            ]
            if dead:
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id.in_(dead), jobs.c.state == "running")
                    .values(expires_at=EXPIRED)
                )
            return len(dead)

    def renew(self, job: StageJob, ttl_seconds: float) -> bool:
        """Push the job's lease forward; False once it is not ours (its token moved on)."""
        with self._engine.begin() as conn:
            moment = db.clock(conn)
            done = conn.execute(
                update(jobs)
                .where(*_held(job))
                .values(expires_at=iso(moment + dt.timedelta(seconds=ttl_seconds)))
            )
            return done.rowcount == 1

    def finish(
        self,
        job: StageJob,
        *,
        state: str,
        error: str | None,
        output: str,
        result: dict[str, Any] | None,
        metrics_by_name: dict[str, float | None] | None = None,
        retry_in: float | None = None,
        uncount: bool = False,
    ) -> bool:
        """Record the attempt's end, only while the job is still ours (same token): `done` with
        its result and metrics (source `stage:<name>`), `failed`, `cancelled`, or back to
        `pending` after `retry_in` seconds. False: another daemon has the job now."""
        with self._engine.begin() as conn:
            moment = db.clock(conn)
            values: dict[str, Any] = {
                "state": "pending" if retry_in is not None else state,
                "error": error,
                "output": output[-OUTPUT_MAX:],
                "result": result,
                "ended_at": iso(moment),
                "expires_at": None,
            }
            if retry_in is not None:
                values["not_before"] = iso(moment + dt.timedelta(seconds=retry_in))
            if uncount:  # an attempt cut short by our own stop: not one of its retries
                values["attempts"] = jobs.c.attempts - 1
            done = conn.execute(update(jobs).where(*_held(job)).values(**values))
            if done.rowcount != 1:
                return False
            if metrics_by_name:
                _replace_stage_metrics(conn, job, metrics_by_name)
            change_feed.announce(conn)
            return True

    def cancel_gone(self) -> int:
        """Pending jobs whose checkpoint is no longer ok, or was rewritten since: cancelled."""
        gone = (
            select(checkpoints.c.id)
            .where(
                checkpoints.c.id == jobs.c.checkpoint_id,
                checkpoints.c.status == "ok",
                checkpoints.c.hash == jobs.c.generation,
            )
            .exists()
        )
        with self._engine.begin() as conn:
            done = conn.execute(
                update(jobs)
                .where(jobs.c.state == "pending", ~gone)
                .values(state="cancelled", error="its checkpoint is gone or was rewritten")
            )
            return done.rowcount or 0

    def set_state(self, job_id: int, state: str, *, only_from: Sequence[str], why: str) -> bool:
        """`ckpt jobs retry|cancel`: a job moved to `state` from one of `only_from`."""
        with self._engine.begin() as conn:
            at = iso(db.clock(conn))
            values: dict[str, Any] = {"state": state, "error": why, "not_before": at}
            if state == "pending":
                values["attempts"] = 0
            done = conn.execute(
                update(jobs).where(jobs.c.id == job_id, jobs.c.state.in_(only_from)).values(values)
            )
            return done.rowcount == 1

    def get(self, job_id: int) -> StageJob | None:
        with self._engine.connect() as conn:
            found = self._jobs(conn, jobs.c.id == job_id)
        return found[0] if found else None

    def list(
        self,
        *,
        run: str | None = None,
        state: str | None = None,
        checkpoint_id: int | None = None,
        limit: int = 1000,
        checkpoint_ids: Sequence[int] | None = None,
    ) -> builtins.list[StageJob]:
        conditions = []
        if state is not None:
            conditions.append(jobs.c.state == state)
        if checkpoint_id is not None:
            conditions.append(jobs.c.checkpoint_id == checkpoint_id)
        if checkpoint_ids is not None:  # a page of checkpoints' jobs (the web view's run table)
            conditions.append(jobs.c.checkpoint_id.in_(list(checkpoint_ids)))
        with self._engine.connect() as conn:
            return self._jobs(conn, and_(True, *conditions), limit=limit, run=run)

    def open_for(self, checkpoint_ids: Sequence[int]) -> dict[int, builtins.list[str]]:
        """{checkpoint id: [stages pending or running]}: what retention must wait for."""
        if not checkpoint_ids:
            return {}
        stmt = select(jobs.c.checkpoint_id, jobs.c.stage).where(
            jobs.c.checkpoint_id.in_(list(checkpoint_ids)), jobs.c.state.in_(OPEN_STATES)
        )
        found: dict[int, builtins.list[str]] = {}
        with self._engine.connect() as conn:
            for ckpt_id, stage in conn.execute(stmt):
                found.setdefault(ckpt_id, []).append(stage)
        return found

    def counts(self) -> dict[tuple[str, str], int]:
        """{(stage, state): jobs}: the queue's depth for `/metrics`."""
        stmt = select(jobs.c.stage, jobs.c.state, func.count()).group_by(jobs.c.stage, jobs.c.state)
        with self._engine.connect() as conn:
            return {(s, st): n for s, st, n in conn.execute(stmt)}

    def signature(self) -> str:
        """What moves at every change of a job (made, claimed, ended, cancelled, retried): the
        web view draws a page again when it does (its checkpoints' stages are on it)."""
        stmt = select(func.count(), func.sum(jobs.c.token), func.max(jobs.c.ended_at)).add_columns(
            func.sum(jobs.c.state.in_(OPEN_STATES).cast(Integer))
        )
        with self._engine.connect() as conn:
            return ":".join(str(v or 0) for v in conn.execute(stmt).one())

    def _jobs(
        self, conn: Any, condition: Any, *, limit: int | None = None, run: str | None = None
    ) -> builtins.list[StageJob]:
        stmt = (
            select(
                jobs,
                checkpoints.c.path.label("ckpt_path"),
                RUNS.c.name.label("run_name"),
            )
            .join(checkpoints, checkpoints.c.id == jobs.c.checkpoint_id)
            .join(RUNS, RUNS.c.id == checkpoints.c.run_id)
            .where(condition)
            .order_by(jobs.c.id)
        )
        if run is not None:
            stmt = stmt.where(or_(RUNS.c.name == run, RUNS.c.name.startswith(f"{run}/")))
        if limit is not None:
            stmt = stmt.limit(limit)
        return [
            to_record(StageJob, r, path=r.ckpt_path, run=r.run_name) for r in conn.execute(stmt)
        ]


def _taken(holder: str, moment: dt.datetime, ttl_seconds: float) -> dict[str, Any]:
    """A job's values once `holder` takes it at `moment`: its token moves on."""
    return {
        "state": "running",
        "attempts": jobs.c.attempts + 1,
        "token": jobs.c.token + 1,
        "holder": holder,
        "started_at": iso(moment),
        "expires_at": iso(moment + dt.timedelta(seconds=ttl_seconds)),
        "ended_at": None,
    }


def _held(job: StageJob) -> tuple[Any, ...]:
    """SQL: the job's row while `job` still holds it (running, the same token: the fence)."""
    return jobs.c.id == job.id, jobs.c.token == job.token, jobs.c.state == "running"


def _replace_stage_metrics(conn: Any, job: StageJob, values: dict[str, float | None]) -> None:
    """The stage's metrics of the checkpoint become `values` (source `stage:<name>`); the
    metrics derived from names and logs are left as they are."""
    source = f"stage:{job.stage}"
    conn.execute(
        delete(metrics).where(
            metrics.c.checkpoint_id == job.checkpoint_id,
            or_(metrics.c.source == source, metrics.c.name.in_(list(values))),
        )
    )
    conn.execute(
        insert(metrics),
        [
            {"checkpoint_id": job.checkpoint_id, "name": n, "value": v, "source": source}
            for n, v in values.items()
        ],
    )
