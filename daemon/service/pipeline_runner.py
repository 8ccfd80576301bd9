"""The service's pipeline thread: every pass it makes the jobs complete checkpoints lack,
cancels those whose checkpoint went, and claims what this host may run (its `service.labels`
against each stage's `runs_on`, at most a stage's `concurrency` at once), each attempt in a
thread of its own running the stage's child (`service.stage_child`), its end recorded in the
catalog only while the job is still ours. Woken early when the worker indexed something, so a
stage starts within a second or so of its checkpoint's completion."""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..catalog.store import Store
from ..catalog.store_stage_jobs import QUEUE_ERRORS, StageJob
from ..core.errors import NotFound
from ..core.pipeline import Stage
from ..logs import event
from ..settings.config import Config
from ..usecases.pipeline import Attempt, final_recheck, make_jobs, record, runnable_here
from .hooks import HookRunner
from .stage_child import run_attempt

POLL_SECONDS = 1.0
# `ckpt_stage_duration_seconds`' buckets: a stage is a quick check, an eval, or a conversion.
DURATION_BUCKETS = (1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)


class PipelineRunner(threading.Thread):
    def __init__(
        self,
        config: Callable[[], Config],
        store: Store,
        hooks: HookRunner,
        stopping: threading.Event,
    ) -> None:
        super().__init__(name="pipeline", daemon=True)
        self._config, self._store, self._hooks, self._stopping = config, store, hooks, stopping
        self._wake = threading.Event()
        # Checkpoints a stage of which waits for another (its `needs`): looked at again when a
        # job of theirs ends, not at every pass ({id: hash}).
        self._waiting: dict[int, str] = {}
        self._looked = time.monotonic()  # when the waiting ones were last let go (`on: final`)
        self._active: collections.Counter[str] = collections.Counter()
        self._attempts: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.failures = 0
        # stage -> its attempts since the service started: durations and failures (/metrics)
        self._timings: dict[str, dict[str, Any]] = {}
        self.tick = time.monotonic()
        self.holder = f"{socket.gethostname()}:{os.getpid()}"

    def poke(self) -> None:
        """Something was indexed: look for new jobs now rather than at the next pass."""
        self._wake.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
            self.tick = time.monotonic()
            config = self._config()
            if not config.pipeline or self._stopping.is_set():
                continue
            try:
                self._pass(config)
            except QUEUE_ERRORS as exc:  # a busy or full catalog: the next pass tries again
                self.failures += 1
                event("pipeline_error", level=logging.WARNING, error=str(exc).splitlines()[0])
        for attempt in self._attempts:
            attempt.join()

    def _pass(self, config: Config) -> None:
        queue = self._store.stage_jobs
        recheck = final_recheck(config.pipeline)
        if recheck is not None and time.monotonic() - self._looked >= recheck:
            with self._lock:  # whether their runs have ended: asked again
                self._waiting.clear()
            self._looked = time.monotonic()
        make_jobs(self._store.reads, self._store.stage_jobs, config.pipeline, self._waiting)
        queue.cancel_gone()
        queue.free_dead_holders(socket.gethostname())
        self._attempts = [t for t in self._attempts if t.is_alive()]
        for stage in runnable_here(config.pipeline, config.labels):
            with self._lock:
                free = stage.concurrency - self._active[stage.name]
            if free <= 0:
                continue
            for job in queue.claim([stage.name], self.holder, config.lease_seconds, free):
                with self._lock:
                    self._active[stage.name] += 1
                thread = threading.Thread(
                    target=self._attempt, args=(config, stage, job), name=f"stage-{job.id}"
                )
                self._attempts.append(thread)
                thread.start()

    def _attempt(self, config: Config, stage: Stage, job: StageJob) -> None:
        try:
            started = time.monotonic()
            state = run_and_record(self._store, config, stage, job, self._stopping)
            self._count(stage.name, state, time.monotonic() - started)
            if state == "failed":
                self.failures += 1
                failed = self._store.stage_jobs.get(job.id)
                self._hooks.emit(
                    "stage_failed",
                    stage=stage.name,
                    path=job.path,
                    run=job.run,
                    job=job.id,
                    reason=failed.error if failed else None,
                )
        except Exception as exc:  # one job's trouble never stops the others or the thread
            self.failures += 1
            event("stage_error", level=logging.WARNING, job=job.id, error=repr(exc))
        finally:
            with self._lock:
                self._active[stage.name] -= 1
                self._waiting.pop(job.checkpoint_id, None)  # a stage that needs this one may run
            self._wake.set()

    def _count(self, stage: str, state: str, seconds: float) -> None:
        """An attempt that ran (done, failed, or failed and to be retried) in the stage's
        durations; a failed one in its failures too."""
        if state not in ("done", "failed", "pending"):
            return  # cancelled before it ran, or lost to another daemon: no attempt of ours
        with self._lock:
            timing = self._timings.setdefault(
                stage,
                {"le": list(DURATION_BUCKETS), "buckets": [0] * len(DURATION_BUCKETS)}
                | {"sum": 0.0, "count": 0, "failures": 0},
            )
            for i, bound in enumerate(DURATION_BUCKETS):
                timing["buckets"][i] += seconds <= bound
            timing["sum"] += seconds
            timing["count"] += 1
            timing["failures"] += state != "done"

    def timings(self) -> dict[str, dict[str, Any]]:
        """stage -> {le, buckets (cumulative), sum, count, failures} since the service started."""
        with self._lock:
            return {k: {**v, "buckets": list(v["buckets"])} for k, v in self._timings.items()}


def run_and_record(
    store: Store, config: Config, stage: Stage, job: StageJob, stopping: threading.Event
) -> str:
    """One attempt of a claimed job, start to record: cancelled if its checkpoint went or was
    rewritten since the job was made. Returns the state recorded (or `lost`)."""
    queue = store.stage_jobs
    try:
        checkpoint = store.reads.get(str(job.checkpoint_id))
    except NotFound:
        checkpoint = None
    if checkpoint is None or checkpoint.status.value != "ok" or checkpoint.hash != job.generation:
        why = "its checkpoint is gone or was rewritten"
        ok = queue.finish(job, state="cancelled", error=why, output="", result=None)
        return "cancelled" if ok else "lost"
    event("stage_started", stage=stage.name, job=job.id, path=job.path, attempt=job.attempts)
    started = time.monotonic()
    attempt: Attempt = run_attempt(
        config,
        stage,
        checkpoint,
        still_ours=lambda: queue.renew(job, config.lease_seconds),
        stopping=stopping,
        renew_every=config.lease_seconds / 4,
    )
    if stopping.is_set() and attempt.exit_code is None:
        # Not a result: the job goes back to the queue for the next holder (this daemon
        # restarted, or another), its attempt not counted against its retries.
        queue.finish(
            job,
            state="pending",
            error="the service stopped",
            output="",
            result=None,
            retry_in=0,
            uncount=True,
        )
        return "lost"
    state = record(queue, job, stage, attempt)
    event(
        "stage_ended",
        level=logging.INFO if state == "done" else logging.WARNING,
        stage=stage.name,
        job=job.id,
        state=state,
        seconds=round(time.monotonic() - started, 3),
        error=attempt.error,
    )
    return state
