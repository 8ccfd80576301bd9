"""`ckpt serve`: the long-running service that systemd runs (Type=notify).

Start: signals first (Python's defaults would kill us mid-write), config (a bad one is refused,
exit 2), catalog migration (SQLite: backup first), our own leftover temp files removed, the
watcher started (so nothing written meanwhile is missed), every root reconciled (with the trash
folders and the acts of processes that died: `usecases.recovery`), then the indexing worker, the
jobs thread and the scheduler, then READY=1. SIGHUP reloads the config (an invalid one keeps
the old); SIGTERM/SIGINT stop taking work: the worker finishes or abandons its item, the jobs
thread starts nothing new (a running child is asked to end), and the service exits 0.
TensorFlow is never imported into this process.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from dataclasses import asdict
from typing import Any

from .. import logs
from ..catalog.audit import actor
from ..catalog.store import Store
from ..core.errors import ConfigError
from ..core.model import Hint, HintKind, Job, JobName, Rescan
from ..core.units import iso_utc
from ..fs import fsops
from ..logs import event
from ..settings import config as config_module
from ..settings import locations
from ..settings.config import Config
from ..usecases.indexer import scan
from ..usecases.scan_report import ScanReport
from . import exporter
from .catalog_full import RETRY_SECONDS, CatalogFull
from .disk_guard import DiskGuard
from .health import is_live
from .hooks import HookRunner, Notifications
from .job_runner import JobRunner
from .jobs import Jobs
from .pipeline_runner import PipelineRunner
from .running_parts import RunningParts
from .systemd import Notifier, watchdog_interval
from .watcher import Watcher
from .web_host import StartWebView, WebHost
from .worker import Stats, Worker

STATUS_EVERY_SECONDS = 10.0


class Service:
    def __init__(
        self, config_path: str | None, database: str | None, web_view: StartWebView | None = None
    ) -> None:
        self.config_path, self.database = config_path, database
        self.web = WebHost(web_view)  # `service.web_listen`: the read-only web view
        self.stopping = threading.Event()
        self.reload_requested = threading.Event()
        self.notifier = Notifier()
        self.remotes: list[dict[str, Any]] = []  # the start's probe of each store, for status
        self._install_signals()
        self.config: Config = config_module.load(config_path, database_override=database)
        logs.setup(self.config.log_level)
        self.catalog_full = CatalogFull(self.config.database, self._waiting_for_space)
        self._ready = False

    def _waiting_for_space(self, status: str) -> None:
        """systemd: why nothing happens, and (before READY=1) time enough for the next try."""
        fields = [f"STATUS={status}"]
        if not self._ready:
            fields.append(f"EXTEND_TIMEOUT_USEC={int(4 * RETRY_SECONDS * 1_000_000)}")
        self.notifier.send(*fields)

    def _install_signals(self) -> None:
        def stop(signum: int, _frame: Any) -> None:
            event("stop_requested", signal=signal.Signals(signum).name)
            self.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, lambda _s, _f: self.reload_requested.set())

    def run(self, *, once: bool = False) -> int:
        event(
            "starting",
            config=self.config.source,
            sqlite=sqlite3.sqlite_version,
            roots=",".join(str(r.path) for r in self.config.roots),
        )

        def open_store() -> Store:
            return Store(
                self.config.database,
                may_migrate=True,
                named_roots=self.config.named_roots(),
                node=self.config.node_name,
            )

        # `--once` (cron) fails at once; the service waits for space on the catalog's disk.
        opened = (
            open_store()
            if once
            else self.catalog_full.attempt("opening the catalog", open_store, self.stopping)
        )
        if opened is None:  # stopped while waiting for space
            event("stopping")
            return 0
        store = opened
        for name, rows in store.adopted.items():  # a root named since: its history is kept
            event("root_named", root=name, rows=rows)
        self._remember_config()
        try:
            if any(self.config.remote_for(r) for r in self.config.roots):
                from ..usecases.tier.remote_start import check_remotes

                # Unreachable or read-only: exit 2, naming the key.
                self.remotes = [asdict(c) for c in check_remotes(self.config)]
            self._remove_stale_temps()
            if once:
                started_at = iso_utc(time.time())
                report = self._reconcile(store)
                failed = self._run_jobs_once(store)
                self._record_once(store, started_at, report, failed)
                return 3 if report.failed or report.errors or failed else 0
            return self._serve(store)
        finally:
            store.close()

    def _remember_config(self) -> None:
        """A config found in the working folder (the README's first command) is remembered,
        so every later `ckpt` finds it from any folder (settings.locations, step 6)."""
        path = locations.worth_remembering(self.config.source, self.config_path, os.environ)
        record = locations.remembered_file()
        if path is None or record is None:
            return
        try:
            fsops.write_state_file(record, f"{path}\n".encode())
        except OSError as exc:  # a read-only home: commands elsewhere need --config then
            event("config_not_remembered", level=logging.WARNING, path=record, error=str(exc))
            return
        event("config_remembered", config=path, record=record)

    def _remove_stale_temps(self) -> None:
        for root in self.config.roots:
            if root.path.is_dir():
                for path in fsops.remove_stale_temps(root.path):
                    event("removed_temp", path=path)

    def _run_jobs_once(self, store: Store) -> bool:
        """`--once`: the file-changing jobs the config asks for (retention, trash purge,
        artifacts, a disk guard pass), through the worker's own code, without starting its
        thread. The verify job (a full re-hash) is left to `ckpt verify`. Returns whether some
        item failed."""
        stats = Stats(started_at=iso_utc(time.time()))
        runner = JobRunner(self.config, store, stats, self.stopping, lambda _rescan: None)
        jobs = [JobName.PURGE]
        if self.config.runs_retention():
            jobs.insert(0, JobName.RETENTION)
        if self.config.artifacts.enabled:
            jobs.append(JobName.ARTIFACTS)
        for name in jobs:
            runner.run_job(name)
        # The disk guard's pass too, with the thread's own code: cron gets the same relief.
        guard = DiskGuard(lambda: self.config, store, HookRunner((), self.stopping), self.stopping)
        try:
            guard.check()
        except Exception as exc:  # as in the thread: logged, and `--once` exits 3
            event("disk_guard_error", level=logging.ERROR, error=str(exc))
            return True
        return stats.last_error is not None

    def _record_once(self, store: Store, started_at: str, report: ScanReport, failed: bool) -> None:
        """What `ckpt status` says after `--once`: when it ran and how it ended."""
        problems = [*report.errors, *(f"{p}: {why}" for p, _status, why in report.failed)]
        last_error = problems[-1] if problems else ("a job failed" if failed else None)
        store.daemons.record_once(
            self.config.node_name,
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=started_at,
            state={
                "stopped_at": iso_utc(time.time()),
                "checkpoints": store.reads.count(),
                "indexed": len(report.indexed),
                "last_error": last_error,
                "heartbeat_seconds": self.config.heartbeat_seconds,
                "remotes": self.remotes,
            },
            is_live=is_live,
        )

    def _reconcile(self, store: Store) -> ScanReport:
        self.notifier.status("reconciling roots with the catalog")
        last = [time.monotonic()]

        def progress(_path: str) -> None:  # a long first walk must not look like a hang
            if time.monotonic() - last[0] > 5:
                last[0] = time.monotonic()
                self.notifier.send("EXTEND_TIMEOUT_USEC=60000000", "WATCHDOG=1")

        report = scan(
            self.config,
            store,
            actor=f"daemon:{actor()}",
            progress=progress,
            should_stop=self.stopping.is_set,
        )
        event(
            "reconciled",
            indexed=len(report.indexed),
            unchanged=report.unchanged,
            missing=len(report.missing),
            failed=len(report.failed),
            incomplete=len(report.incomplete),
        )
        return report

    def _serve(self, store: Store) -> int:
        stats = Stats(started_at=iso_utc(time.time()))
        worker = Worker(self.config, store, stats, self.stopping, self.catalog_full)
        runner = JobRunner(self.config, store, stats, self.stopping, worker.offer)
        watcher = Watcher(self.config.roots, worker.offer)

        def enqueue(item: Rescan | Job) -> None:  # slow jobs never wait in the indexing queue
            if isinstance(item, Job):
                runner.offer(item)
            else:
                worker.offer(item)

        jobs = Jobs(enqueue)
        hooks = HookRunner(self.config.hooks, self.stopping)
        notifications = Notifications(hooks, store, lambda: self.config)
        guard = DiskGuard(lambda: self.config, store, hooks, self.stopping)
        pipeline = PipelineRunner(lambda: self.config, store, hooks, self.stopping)

        def after_scan(report: ScanReport) -> None:
            notifications.scanned(report)
            if report.indexed:  # a new file may have crossed min_free: measure now
                guard.poke()
                pipeline.poke()  # and may be a complete checkpoint a stage is due for

        worker.after_scan = after_scan
        runner.notifications = notifications
        parts = RunningParts(worker, watcher, jobs, runner, hooks, guard, pipeline)
        worker.more_state = lambda: {**parts.state(), "remotes": self.remotes}
        self._store = store
        # One daemon per node on a catalog: a second one is refused (exit 2) before it acts.
        registered = self.catalog_full.attempt(
            "registering",
            lambda: store.daemons.register(
                self.config.node_name,
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=stats.started_at,
                state=worker.state(),
                is_live=is_live,
            ),
            self.stopping,
        )
        if registered is None:
            event("stopping")
            return 0
        worker.registered(registered)
        event("registered", node=self.config.node_name)
        watcher.start()  # before reconciling: what is written meanwhile is queued, not lost
        try:
            self._start_metrics(parts)  # a port already taken: exit 2, naming the key
            self.web.start(self.config)
            hooks.start()
            report = self.catalog_full.attempt(
                "reconciling", lambda: self._reconcile(store), self.stopping
            )
            if report is not None and not report.cancelled:
                stats.last_scan_time = time.time()
            for path, _reason in report.incomplete if report is not None else []:
                worker.offer(Hint(path, HintKind.CHANGED))
            worker.start()
            runner.start()
            guard.start()
            pipeline.start()
            jobs.start(self.config)
            self.notifier.ready(parts.status_line())
            self._ready = True
            event("ready", pid=os.getpid())
            self._main_loop(parts)
        finally:
            self.notifier.stopping()
            event("stopping")
            self.stopping.set()
            self.web.stop()
            parts.stop()
            try:
                worker.final_heartbeat(stopped_at=iso_utc(time.time()))
            except Exception as exc:  # a full disk: the stop is still a clean one
                if not self.catalog_full.check(exc, "stopping"):
                    raise
        return 0

    def _start_metrics(self, parts: RunningParts) -> None:
        """`/metrics` on `service.metrics_listen`, if set; each scrape reads the catalog."""
        listen = self.config.metrics_listen
        if listen is None:
            return
        store = self._store

        def produce() -> exporter.Snapshot:
            return exporter.snapshot(self.config, store, parts.metrics_state())

        try:
            parts.metrics = exporter.MetricsServer(listen, produce)
        except OSError as exc:
            why = f"cannot listen on {listen}: {exc}"
            raise ConfigError("service.metrics_listen", why) from exc

    def _main_loop(self, parts: RunningParts) -> None:
        ping_every = watchdog_interval()
        next_ping = next_status = time.monotonic()
        while not self.stopping.wait(timeout=min(ping_every or 1.0, 1.0)):
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload(parts)
            now = time.monotonic()
            if ping_every and now >= next_ping and parts.healthy(self.config):
                self.notifier.watchdog()
                next_ping = now + ping_every
            if now >= next_status:
                self.notifier.status(parts.status_line())
                next_status = now + STATUS_EVERY_SECONDS

    def _reload(self, parts: RunningParts) -> None:
        self.notifier.reloading()
        try:
            new = config_module.load(self.config_path, database_override=self.database)
            config_module.require_roots(new)
            if new.database != self.config.database:
                raise ConfigError("database", "cannot change while running: restart the service")
        except ConfigError as exc:
            event("reload_refused", level=logging.ERROR, error=str(exc))
            parts.worker.stats.last_error = f"reload refused: {exc}"
            self.notifier.ready(parts.status_line())
            return
        logs.setup(new.log_level)
        if new.roots != self.config.roots:
            parts.watcher.stop()
            parts.watcher = Watcher(new.roots, parts.worker.offer)
            parts.watcher.start()
            parts.worker.offer(Rescan("roots changed on reload"))
        parts.jobs.reschedule(new)
        parts.hooks.hooks = new.hooks
        moved = new.metrics_listen != self.config.metrics_listen
        self.web.reload(self.config, new)
        parts.worker.config = parts.runner.config = self.config = new
        if moved:
            parts.stop_metrics()
            try:
                self._start_metrics(parts)
            except ConfigError as exc:  # the new address is taken: no /metrics until fixed
                event("metrics_refused", level=logging.ERROR, error=str(exc))
        event("reloaded", config=new.source)
        self.notifier.ready(parts.status_line())
