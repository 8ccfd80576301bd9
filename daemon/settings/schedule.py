"""The `schedule:` section of config.yaml: how often each of the service's background jobs runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.model import JobName
from .bounds import bounded
from .values import mapping

SCHEDULE_KEYS = {job.value for job in JobName} | {"misfire_grace"}


@dataclass(frozen=True)
class Schedule:
    """Seconds between runs of each background job (one field per `JobName`); 0 turns a job
    off."""

    rescan: float = 600.0
    retention: float = 900.0
    purge: float = 21600.0
    verify: float = 86400.0
    artifacts: float = 1800.0
    misfire_grace: float = 300.0

    def every(self, job: JobName) -> float:
        return float(getattr(self, job.value))


def parse_schedule(value: Any) -> Schedule:
    raw = mapping(value, "schedule", SCHEDULE_KEYS)
    default = Schedule()
    every = {
        job.value: bounded(raw.get(job, default.every(job)), f"schedule.{job}") for job in JobName
    }
    misfire_grace = raw.get("misfire_grace", default.misfire_grace)
    return Schedule(**every, misfire_grace=bounded(misfire_grace, "schedule.misfire_grace"))
