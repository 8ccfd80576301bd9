"""The service's indexing thread: turns hints into indexing once files are complete.

It does all the indexing of the daemon process; the slow jobs (retention, purge, verify,
split/compress) run on their own thread (`service.job_runner`) so that indexing never waits
for them. Hints mark a target pending; a target is indexed once `completion.is_ready` says so
and no local process has it open for writing. Rescans (scheduled, or after lost events) walk
whole roots.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.audit import actor
from ..catalog.store import Store
from ..children import reader_child
from ..core import completion, families
from ..core.model import FileStat, Hint, HintKind, Rescan
from ..core.units import iso_utc
from ..fs import discovery, folder_layouts, procfs
from ..logs import event
from ..settings.config import Config
from ..usecases.indexer import scan
from ..usecases.scan_report import ScanReport
from .catalog_full import CatalogFull

TICK_SECONDS = 0.1
READER_CHILD_IDLE_SECONDS = 600.0  # the file reader child (~60 MB): kept for low latency
_TF_NAMES = ("checkpoint",)
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "keras_metadata.pb")
_METRICS_SUFFIXES = (".csv", ".log", ".json", ".jsonl", ".tsv", ".txt")
_TENSORBOARD_PREFIX = "events.out.tfevents."
# The folders Keras's TensorBoard callback (and habit) put event files in, below the run.
_TENSORBOARD_FOLDERS = {"train", "validation", "eval", "logs", "log", "tensorboard", "tb"}
# The reason usecases.indexer gives a corrupt or unreadable file it saw again unchanged: already
# counted and told when it failed.
UNCHANGED_FAILURE = "unchanged since"


def new_failures(report: ScanReport) -> list[tuple[str, str, str]]:
    """The files this scan found corrupt or unreadable, not those that already were."""
    return [f for f in report.failed if f[2] != UNCHANGED_FAILURE]


@dataclass
class Stats:
    """What the service reports about itself (STATUS=, heartbeat, `ckpt status`)."""

    started_at: str
    tick: float = field(default_factory=time.monotonic)  # last time the worker loop ran
    indexed: int = 0
    last_index_at: str | None = None
    last_error: str | None = None
    failed: int = 0
    last_scan_time: float | None = None  # when the last walk of every root ended (epoch s)
    index_errors: int = 0  # files found corrupt or unreadable (each once, until it changes)
    worker_errors: int = 0  # the worker loop's own exceptions (catalog down, disk errors)
    scan_errors: int = 0  # whole roots a scan could not walk


def target_for(path: Path, is_dir: bool) -> tuple[Path, bool] | None:
    """What a hinted path means to index: (path, is a folder), or None if it is not ours."""
    if any(discovery.is_skipped_dir(part) for part in path.parts[:-1]):
        return None
    name = path.name
    if is_dir:
        return None if discovery.is_skipped_dir(name) else (path, True)
    if discovery.is_temp_name(name):
        return None
    if name in _SAVED_MODEL_FILES:
        return path.parent, True
    folder = folder_layouts.announced_folder(path)
    if folder is not None:  # a file of a folder checkpoint: the folder is read as a whole
        return folder, True
    if path.parent.name == "variables" and name.startswith("variables."):
        return path.parent.parent, True
    if name in _TF_NAMES or name.endswith(".index") or discovery.is_data_shard(name):
        return path.parent, True  # a TF checkpoint completes as a set: look at the folder
    if name.lower().endswith(families.suffixes()):
        return path, False
    if name.lower().endswith(_METRICS_SUFFIXES):
        return path.parent, True  # metrics of the run's checkpoints may have changed
    if name.startswith(_TENSORBOARD_PREFIX):  # <run>/logs/validation/events.out.tfevents...
        folder = path.parent
        while folder.name.lower() in _TENSORBOARD_FOLDERS and folder.parent != folder:
            folder = folder.parent
        return folder, True
    return None


class Worker(threading.Thread):
    def __init__(
        self,
        config: Config,
        store: Store,
        stats: Stats,
        stopping: threading.Event,
        catalog_full: CatalogFull | None = None,
    ) -> None:
        super().__init__(name="ckpt-worker", daemon=True)
        self.config = config  # replaced on reload, read at each step
        self.store = store
        self.catalog_full = catalog_full or CatalogFull(config.database)
        self.stats = stats
        self.stopping = stopping
        self.queue: queue.Queue[Hint | Rescan] = queue.Queue(maxsize=100_000)
        self.pending: dict[Path, completion.Pending] = {}
        self.folders: set[Path] = set()
        self._rescan: Rescan | None = None
        self._heartbeat_id: int | None = None
        self._beat_at = 0.0
        # The service adds what only it knows (observers, job counts) to every heartbeat.
        self.more_state: Callable[[], dict[str, Any]] = dict
        # What every scan found, for the hooks (service.hooks.Notifications.scanned).
        self.after_scan: Callable[[ScanReport], None] = lambda _report: None
        self.last_beat_time: float | None = None

    def offer(self, item: Hint | Rescan) -> None:
        """Called from watcher and scheduler threads: never blocks, never raises."""
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self._rescan = Rescan("work queue overflow")

    def run(self) -> None:
        reader_child.keep_session()  # started now: the first file does not wait for it
        try:
            self._loop()
        finally:
            reader_child.end_idle(0)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            full = self.catalog_full.full
            if full:
                self._beat_at = 0.0  # a heartbeat each step: a write that says space is back
            try:
                self._step()
            except Exception as exc:  # the catalog is down, a disk error: log, retry later
                self.stats.worker_errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                if not self.catalog_full.check(exc, "indexing"):  # said once, not each retry
                    event("worker_error", level=logging.ERROR, error=self.stats.last_error)
                self.stopping.wait(5)
            else:
                if full and self.catalog_full.cleared():
                    # hints taken while full were lost with their writes: walk every root
                    self._rescan = Rescan("the catalog's disk had no space")
            self.stats.tick = time.monotonic()

    def _step(self) -> None:
        try:
            item: Hint | Rescan | None = self.queue.get(timeout=TICK_SECONDS)
        except queue.Empty:
            item = None
        while item is not None:
            self._take(item, time.monotonic())
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                item = None
        if self._rescan is not None:
            self.rescan(self._rescan)
        self._index_ready(time.monotonic())
        self._heartbeat()
        reader_child.end_idle(READER_CHILD_IDLE_SECONDS)

    def _take(self, item: Hint | Rescan, now: float) -> None:
        if isinstance(item, Rescan):
            self._rescan = item
            return
        if item.kind == HintKind.OVERFLOW:
            self._rescan = Rescan("events were lost (inotify queue overflow)")
            return
        path = Path(item.path)
        if self.config.root_for(path) is None or self.config.state_dir in path.parents:
            return
        found = target_for(path, item.is_dir)
        if found is None:
            return
        target, is_folder = found
        if is_folder:
            self.folders.add(target)
        done = item.kind in (HintKind.CLOSED, HintKind.MOVED, HintKind.DELETED)
        stat = None if is_folder else _stat(target)
        self.pending[target] = completion.observe(self.pending.get(target), stat, now, done)

    def _index_ready(self, now: float) -> None:
        cfg = self.config
        for target, state in list(self.pending.items()):
            if target not in self.folders:  # a file may change without events (NFS)
                self.pending[target] = completion.observe(state, _stat(target), now, False)
        ready = [
            t
            for t, p in self.pending.items()
            if completion.is_ready(p, now, cfg.settle_seconds, cfg.min_age_seconds)
        ]
        if not ready:
            return
        writers = procfs.writers_under(root.path for root in cfg.roots)
        for target in ready:
            if self.stopping.is_set():
                return
            busy = [w for w in writers if w == str(target) or w.startswith(f"{target}/")]
            if busy:  # still open for writing: look again after the next quiet period
                self.pending[target] = completion.Pending(_stat(target), now, False)
                continue
            del self.pending[target]
            self.folders.discard(target)
            self._scan([target], reconcile=False)

    def rescan(self, request: Rescan) -> ScanReport:
        self._rescan = None
        event("rescan", reason=request.reason)
        report = self._scan([Path(request.target)] if request.target else [])
        if not request.target and not report.cancelled:
            self.stats.last_scan_time = time.time()
        return report

    def _scan(self, targets: list[Path], *, reconcile: bool = True) -> ScanReport:
        reader_child.keep_session()  # every checkpoint file is read by it: kept between scans
        report = scan(
            self.config,
            self.store,
            targets,
            actor=f"daemon:{actor()}",
            should_stop=self.stopping.is_set,
            reconcile=reconcile,
        )
        if report.indexed:
            self.stats.indexed += len(report.indexed)
            self.stats.last_index_at = iso_utc(time.time())
        self.stats.failed += len(report.failed)
        self.stats.index_errors += len(new_failures(report))
        self.stats.scan_errors += len(report.errors)
        if report.errors:
            self.stats.last_error = report.errors[-1]
        now = time.monotonic()
        for path, _reason in report.incomplete:  # not finished after all: wait for it to settle
            self.pending[Path(path)] = completion.Pending(_stat(Path(path)), now, False)
        self.after_scan(report)
        return report

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._beat_at < self.config.heartbeat_seconds:
            return
        self._beat_at = now
        self.last_beat_time = time.time()
        self._beat(self.state())

    def state(self, **extra: Any) -> dict[str, Any]:
        return {
            **self.more_state(),
            "checkpoints": self.store.reads.count(),
            "queue": self.queue.qsize() + len(self.pending),
            "indexed": self.stats.indexed,
            "failed": self.stats.failed,
            "last_index_at": self.stats.last_index_at,
            "last_error": self.stats.last_error,
            "heartbeat_seconds": self.config.heartbeat_seconds,
            **extra,
        }

    def registered(self, heartbeat_id: int) -> None:
        """The heartbeat row the service registered this daemon with (`Daemons.register`)."""
        self._heartbeat_id = heartbeat_id
        self._beat_at = time.monotonic()

    def final_heartbeat(self, **extra: Any) -> None:
        """The service's last word in the catalog (`stopped_at`), written by the main thread
        once this thread has ended."""
        self._beat(self.state(**extra))

    def _beat(self, state: dict[str, Any]) -> None:
        self._heartbeat_id = self.store.daemons.beat(
            self._heartbeat_id,
            pid=os.getpid(),
            host=socket.gethostname(),
            node=self.config.node_name,
            started_at=self.stats.started_at,
            state=state,
        )


def _stat(path: Path) -> FileStat | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return FileStat(st.st_size, st.st_mtime_ns, st.st_ino)
