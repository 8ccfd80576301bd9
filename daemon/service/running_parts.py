"""The running pieces of `ckpt serve` (worker, watcher, jobs, job runner, hooks, disk guard, the
metrics server) taken as one: whether they are healthy (systemd's WATCHDOG=1), the state a
heartbeat and `/metrics` report, the status line, and an orderly stop."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..settings.config import Config
from . import exporter
from .disk_guard import DiskGuard
from .hooks import HookRunner
from .job_runner import JobRunner
from .jobs import Jobs
from .pipeline_runner import PipelineRunner
from .watcher import Watcher
from .worker import Worker

WORKER_STALL_SECONDS = 300.0  # longer than any single read (the TF probe times out at 120 s)
# A prune or verify of a huge catalog may take long between two progress ticks, but not this.
RUNNER_STALL_SECONDS = 3600.0


@dataclass
class RunningParts:
    worker: Worker
    watcher: Watcher
    jobs: Jobs
    runner: JobRunner
    hooks: HookRunner
    guard: DiskGuard
    pipeline: PipelineRunner  # the stages' thread (idle without a `pipeline:`)
    metrics: exporter.MetricsServer | None = None

    def metrics_state(self) -> dict[str, Any]:
        """The service's part of the Prometheus metrics (also kept in every heartbeat)."""
        stats = self.worker.stats
        return exporter.service_state(
            queue=self.worker.queue.qsize() + len(self.worker.pending),
            last_scan_time=stats.last_scan_time,
            last_ok=self.runner.last_ok,
            errors={
                "index": stats.index_errors,
                "scan": stats.scan_errors,
                "worker": stats.worker_errors,
                "job": self.runner.failures,
                "scheduler": sum(self.jobs.errors.values()),
                "hook": self.hooks.failed,
                "stage": self.pipeline.failures,
            },
            heartbeat_time=self.worker.last_beat_time,
            remote=exporter.remote_counters(self.runner.config),
            catalog_disk_full=self.worker.catalog_full.full,
            stages=self.pipeline.timings(),
        )

    def state(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics_state(),
            "roots": self.watcher.describe(),
            "disk": self.guard.states,
            "pid": os.getpid(),
            "jobs": {
                "runs": dict(self.jobs.runs),
                "errors": dict(self.jobs.errors),
                "running": self.runner.running,
                "waiting": self.runner.queue.qsize(),
            },
        }

    def healthy(self, config: Config) -> bool:
        """WATCHDOG=1 only while every part works: observers, scheduler, worker, jobs thread and
        disk guard (each ticking)."""
        stats = self.worker.stats
        now = time.monotonic()
        worker_ok = self.worker.is_alive() and now - stats.tick < WORKER_STALL_SECONDS
        runner_ok = self.runner.is_alive() and now - self.runner.tick < RUNNER_STALL_SECONDS
        guard_ok = not self.guard.is_alive() or now - self.guard.tick < RUNNER_STALL_SECONDS
        return (
            worker_ok and runner_ok and guard_ok and self.watcher.healthy() and self.jobs.healthy()
        )

    def status_line(self) -> str:
        stats = self.worker.stats
        return (
            f"{len(self.watcher.describe())} roots, {stats.indexed} indexed since start, "
            f"queue {self.worker.queue.qsize() + len(self.worker.pending)}, "
            f"last error: {stats.last_error or 'none'}"
        )

    def stop_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    def stop(self) -> None:
        self.jobs.stop()
        self.watcher.stop()
        self.stop_metrics()
        if self.hooks.is_alive():
            self.hooks.stop()
        if self.worker.is_alive():
            self.worker.join(timeout=60)
        if self.runner.is_alive():  # a child asked to end gets CHILD_STOP_SECONDS
            self.runner.join(timeout=90)
        if self.guard.is_alive():  # a demotion's split in progress finishes first
            self.guard.join(timeout=90)
        if self.pipeline.is_alive():  # its children are ended
            self.pipeline.join(timeout=90)
