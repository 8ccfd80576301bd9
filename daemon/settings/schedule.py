"""The `schedule:` section of config.yaml: how often each of the service's background jobs runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.model import JobName
from .bounds import bounded
from .values import mapping

SCHEDULE_KEYS = {job.value for job in JobName} | {"misfire_grace", "remote_sample"}


@dataclass(frozen=True)
class Schedule:
    """Seconds between runs of each background job (one field per `JobName`); 0 turns a job
    off."""

    rescan: float = 600.0
    retention: float = 900.0
    purge: float = 21600.0
    verify: float = 86400.0
    artifacts: float = 1800.0
    remote_verify: float = 3600.0
    misfire_grace: float = 300.0
    remote_sample: int = 20  # remote copies read back per `remote_verify` pass

    def every(self, job: JobName) -> float:
        return float(getattr(self, job.value))


def parse_schedule(value: Any) -> Schedule:
    raw = mapping(value, "schedule", SCHEDULE_KEYS)
    default = Schedule()
    every = {
        job.value: bounded(raw.get(job, default.every(job)), f"schedule.{job}") for job in JobName
    }
    misfire_grace = raw.get("misfire_grace", default.misfire_grace)
    sample = raw.get("remote_sample", default.remote_sample)
    return Schedule(
        **every,
        misfire_grace=bounded(misfire_grace, "schedule.misfire_grace"),
        remote_sample=int(bounded(sample, "schedule.remote_sample")),
    )
