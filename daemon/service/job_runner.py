"""The service's jobs thread: retention, trash purge, verify and the artifacts job, one at a
time, beside the indexing worker.

The jobs are slow (a compress of a 300 MB checkpoint takes a minute in its child process, a
verify re-hashes everything), so they never run on the worker thread: indexing never queues
behind them. They still never run two at once (one thread), the scheduler only enqueues them
(a job already waiting is not queued twice), and the catalog serializes the writers of both
threads (BEGIN IMMEDIATE) as it does those of other processes.

Stop means stop: the stop flag is checked before each job and between the items of a job
(each move of a prune, each purge, each split or compress, each verified checkpoint); a child
process running at that moment is asked to end (SIGTERM; its rewrite is atomic, its temp file
and planned event are settled at the next start), and nothing new starts.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..catalog.audit import actor
from ..catalog.store import Store
from ..core.model import Job, JobName, Rescan
from ..logs import event
from ..settings.config import Config
from .stage_child import ckpt_command
from .worker import Stats

if TYPE_CHECKING:
    from ..usecases.pruner import PruneReport
    from .hooks import Notifications

CHILD_STOP_SECONDS = 30.0  # a child asked to end gets this long before SIGKILL
NICE = ["nice", "-n", "10"]  # the split and compress children yield the CPU to training


class JobRunner(threading.Thread):
    def __init__(
        self,
        config: Config,
        store: Store,
        stats: Stats,
        stopping: threading.Event,
        rescan: Callable[[Rescan], None],
    ) -> None:
        super().__init__(name="ckpt-jobs", daemon=True)
        self.config = config  # replaced on reload, read at each job
        self.store = store
        self.stats = stats
        self.stopping = stopping
        self.rescan = rescan
        self.queue: queue.Queue[JobName] = queue.Queue()
        self._waiting: set[JobName] = set()
        self._lock = threading.Lock()
        self.tick = time.monotonic()  # last time the loop ran, or a job made progress
        self.running: JobName | None = None
        self.failures = 0  # job errors and failed items since start (ckpt_errors_total{job})
        self.last_ok: dict[str, float] = {}  # job -> when it last ended without a failure
        # What the hooks hear of (service.hooks.Notifications), set by the service.
        self.notifications: Notifications | None = None
        self._nice: list[str] | None = None  # the children's `nice` prefix, once probed

    def offer(self, item: Job) -> None:
        """From the scheduler's thread: never blocks, never raises; a job already waiting
        is not queued again."""
        with self._lock:
            if item.name in self._waiting:
                return
            self._waiting.add(item.name)
        self.queue.put_nowait(item.name)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.tick = time.monotonic()
            try:
                name = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            with self._lock:
                self._waiting.discard(name)
            if self.stopping.is_set():
                return
            self.running = name
            try:
                self.run_job(name)
            except Exception as exc:  # the catalog is down, a disk error: log, go on
                self.failures += 1
                self.stats.last_error = f"{name}: {type(exc).__name__}: {exc}".splitlines()[0]
                event("job_error", level=logging.ERROR, job=name, error=self.stats.last_error)
            finally:
                self.running = None

    def run_job(self, name: JobName) -> None:
        """One job (its end time kept in `last_ok` when nothing in it failed)."""
        before = self.failures
        if self._run_job(name) and self.failures == before:
            self.last_ok[name.value] = time.time()

    def _run_job(self, name: JobName) -> bool:
        """One job: the same code paths as `ckpt prune`, `trash purge`, `verify`, `split` and
        `compress`. Returns whether it ran (False: stopping, or skipped)."""
        from ..core.errors import CkptError
        from ..usecases import pruner

        if self.stopping.is_set():
            return False
        who = f"daemon:{actor()}"
        if name is JobName.VERIFY:
            self._verify()
            return True
        if name is JobName.ARTIFACTS:
            self._artifacts()
            return not self.stopping.is_set()
        if name is JobName.REMOTE_VERIFY:
            self._remote_verify(who)
            return True
        stop = self.stopping.is_set
        try:
            if name is JobName.RETENTION:
                report = pruner.prune(self.config, self.store, actor=who, should_stop=stop)
                failures = report.failures
                event(
                    "retention",
                    trashed=sum(r.trashed for r in report.runs),
                    failures=len(failures),
                )
                self._tell_retention(report)
            else:  # JobName.PURGE (a rescan is the worker's: never queued here)
                purged, failures = pruner.purge(
                    self.config,
                    self.store,
                    actor=who,
                    older_than=self.config.purge_after_seconds,
                    should_stop=stop,
                )
                event("purge", purged=len(purged), failures=len(failures))
        except CkptError as exc:  # a lease held by a user's `ckpt prune`: next time
            event(f"{name}_skipped", level=logging.WARNING, reason=str(exc))
            return False
        for failure in failures:
            self.failures += 1
            self.stats.last_error = f"{name}: {failure['path']}: {failure['error']}"
            event(f"{name}_failed", level=logging.WARNING, **failure)
        return not stop()

    def _tell_retention(self, report: PruneReport) -> None:
        """A `retention` hook event for each checkpoint the job moved to the trash; `tiered`
        for each it moved to the object store."""
        if self.notifications is None:
            return
        for rp in report.runs:
            for d in rp.plan.decisions:
                if not (rp.moved and d.id in rp.moved):
                    continue
                if d.action == "tier":
                    self.notifications.tiered(d.id, d.path, rp.run, "; ".join(d.reasons))
                else:
                    self.notifications.retention(d.path, rp.run, d.action, "; ".join(d.reasons))

    def _artifacts(self) -> None:
        """Split and compress cold checkpoints, one at a time, each in a `nice` child process
        (the same code path as `ckpt split` / `ckpt compress`, with its own memory)."""
        from ..usecases.artifacts import due

        cfg = self.config.artifacts
        to_split, to_compress = due(self.store.reads, self.store.acts, cfg, time.time())
        work = [("split", c) for c in to_split] + [("compress", c) for c in to_compress]
        for verb, c in work:
            if self.stopping.is_set():
                return
            extra = ["--codec", cfg.codec] if verb == "compress" else []
            self._child(verb, str(c.id), *extra)
            self.tick = time.monotonic()

    def _child(self, *args: str) -> None:
        cmd = [*self._nice_prefix(), *ckpt_command(self.config), *args, "--json"]
        env = {**os.environ, "CKPT_ACTOR": f"daemon:{actor()}"}
        child = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killed whole on a timeout
        )
        out, err = self._wait(child, args)
        if child.returncode == 0:
            event(args[0], path=args[1], result=out.strip()[:300])
            return
        if self.stopping.is_set():
            event(f"{args[0]}_stopped", path=args[1], reason="the service is stopping")
            return
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.failures += 1
        self.stats.last_error = f"{args[0]} {args[1]}: {lines[-1] if lines else child.returncode}"
        event(f"{args[0]}_failed", level=logging.WARNING, error=self.stats.last_error)

    def _nice_prefix(self) -> list[str]:
        """`nice -n 10`, if this process may lower a child's priority: a system call filter
        may forbid setpriority (a hardened unit's `~@resources`: EPERM, or SIGSYS killing the
        child). Probed once, with `nice` itself; refused, the jobs run at normal priority,
        said once in the log."""
        if self._nice is None:
            refused = nice_refused()
            self._nice = [] if refused else NICE
            if refused:
                event("job_priority", level=logging.WARNING, niced=False, reason=refused)
        return self._nice

    def _wait(self, child: subprocess.Popen[str], args: tuple[str, ...]) -> tuple[str, str]:
        """The child's output; asks it to end (then kills it) if the service stops meanwhile;
        kills its whole process group past `artifacts.timeout`."""
        timeout = self.config.artifacts.timeout
        deadline = time.monotonic() + timeout
        while True:
            try:  # never past the deadline: a short `artifacts.timeout` is kept to the letter
                return child.communicate(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.tick = time.monotonic()
                if time.monotonic() > deadline:
                    os.killpg(child.pid, signal.SIGKILL)
                    self.failures += 1
                    self.stats.last_error = f"{args[0]} {args[1]}: killed after {timeout:g} s"
                    event(f"{args[0]}_timeout", level=logging.WARNING, error=self.stats.last_error)
                    return child.communicate()
                if not self.stopping.is_set():
                    continue
            child.terminate()
            try:
                return child.communicate(timeout=CHILD_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.communicate()

    def _verify(self) -> None:
        """Re-hash everything; a file whose bytes changed unseen is re-indexed."""
        from ..usecases.verifier import BIT_ROT, verify

        problem = self.store.index.quick_check()
        if problem:
            self.stats.last_error = f"catalog integrity: {problem}"
            event("catalog_check_failed", level=logging.ERROR, result=problem)
        verdicts = verify(
            self.config,
            self.store.reads,
            self.store.index,
            self.store.acts,
            [],
            should_stop=self.stopping.is_set,
        )
        for v in verdicts:
            if not v.ok:
                event("verify_failed", level=logging.WARNING, path=v.path, detail=v.detail)
                if self.notifications is not None and v.detail.startswith(BIT_ROT):
                    self.notifications.corrupt(v.path, v.detail)
                self.rescan(Rescan(f"verify: {v.detail}", v.path))
        event("verify", checked=len(verdicts), failed=sum(not v.ok for v in verdicts))

    def _remote_verify(self, who: str) -> None:
        """A sample of the verified remote copies read back, those verified longest ago first:
        one gone or changed is marked so (`location` stops saying `remote`), and logged."""
        from ..usecases.tier.remote_verify import verify_sample

        verdicts = verify_sample(
            self.config,
            self.store.reads,
            self.store.acts,
            self.store.remote,
            self.config.schedule.remote_sample,
            actor=who,
        )
        for v in verdicts:
            if not v.ok:
                self.failures += 1
                event("remote_verify_failed", level=logging.WARNING, path=v.path, detail=v.detail)
        event("remote_verify", checked=len(verdicts), failed=sum(not v.ok for v in verdicts))


def nice_refused() -> str | None:
    """Why `nice -n 10` cannot run a child here (None: it can), from a probe of `nice` itself."""
    try:
        probe = subprocess.run(
            [*NICE, "true"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`nice` cannot run: {exc}: split and compress run at normal priority"
    if probe.returncode < 0:
        how = f"killed by {signal.Signals(-probe.returncode).name}"
    elif probe.returncode != 0 or probe.stderr.strip():
        how = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "failed"
    else:
        return None
    return (
        f"`nice -n 10 true`: {how} (a system call filter forbids setpriority?): split and "
        "compress run at normal priority"
    )
