"""Timers for the service's background jobs. The only module that imports APScheduler.

A timer only enqueues work (a `Rescan` for the worker, a `Job` for the jobs thread): it never
touches files or the catalog itself, so timers are instant; `max_instances=1` and coalescing
still guard against pile-ups after a suspend, and a misfire grace of minutes lets a late job
run instead of being dropped.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler

from ..core.model import Job, JobName, Rescan
from ..logs import event
from ..settings.config import Config
from ..usecases.tier.locations import uses_remote


class Jobs:
    def __init__(self, enqueue: Callable[[Rescan | Job], None]) -> None:
        self._enqueue = enqueue
        self.runs: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._scheduler = BackgroundScheduler(timezone="UTC")
        self._scheduler.add_listener(
            self._on_event,
            EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES,
        )

    def start(self, config: Config) -> None:
        self._add(config)
        self._scheduler.start()

    def reschedule(self, config: Config) -> None:
        self._scheduler.remove_all_jobs()
        self._add(config)

    def _add(self, config: Config) -> None:
        schedule = config.schedule
        # Jobs that change files run only when the config asks for them.
        wanted = {
            JobName.RESCAN: True,
            JobName.RETENTION: config.runs_retention(),
            JobName.PURGE: True,
            JobName.VERIFY: True,
            JobName.ARTIFACTS: config.artifacts.enabled,
            JobName.REMOTE_VERIFY: uses_remote(config),
        }
        for name in JobName:
            seconds = schedule.every(name)
            if wanted[name] and seconds > 0:
                self._scheduler.add_job(
                    self._enqueue,
                    "interval",
                    args=[Rescan("scheduled rescan") if name is JobName.RESCAN else Job(name)],
                    seconds=seconds,
                    id=name.value,
                    name=name.value,
                    max_instances=1,
                    coalesce=True,
                    misfire_grace_time=int(schedule.misfire_grace),
                )

    def _on_event(self, ev: JobEvent) -> None:
        if ev.code == EVENT_JOB_EXECUTED:
            self.runs[ev.job_id] += 1
            return
        self.errors[ev.job_id] += 1
        what = {EVENT_JOB_ERROR: "failed", EVENT_JOB_MISSED: "missed"}.get(ev.code, "still running")
        event(
            "job_" + what.replace(" ", "_"),
            level=logging.WARNING,
            job=ev.job_id,
            error=getattr(ev, "exception", None),
        )

    def healthy(self) -> bool:
        return bool(self._scheduler.running)

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
