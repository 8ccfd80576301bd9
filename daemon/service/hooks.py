"""`hooks:`: the operator's commands, run on events (a run's new best checkpoint, a corrupt
checkpoint, disk pressure, a retention act) with a JSON document on stdin.

The callers (worker, jobs thread, the disk guard) only enqueue: `HookRunner.emit` never blocks
and never raises; its own thread runs the commands one at a time, each as an argv (never through
a shell, so no file name is ever parsed by one), in its own session, killed whole at its timeout.
The queue is bounded: when hooks fall behind, the newest events are dropped and counted. A hook
that fails, hangs or cannot be started is one log line; the service goes on. Its stdout and
stderr are read in bounded chunks and only their last `OUTPUT_LIMIT` bytes are kept: a hook that
writes a gigabyte costs the daemon a few kB (reading all of it took it from 61 MB to 3.2 GB).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..catalog.store import Store
from ..core.model import CheckpointStatus
from ..core.observability import hook_document, is_better, monitored_metric
from ..core.query import default_mode
from ..core.units import iso_utc
from ..logs import event
from ..settings.config import Config
from ..settings.operations import Hook
from ..usecases.scan_report import ScanReport
from .worker import new_failures

QUEUE_SIZE = 256
STOP_GRACE_SECONDS = 5.0  # a hook still running when the service stops gets this long
OUTPUT_LIMIT = 4096  # bytes of a hook's stdout and of its stderr kept (the tail)
_READ_CHUNK = 64 << 10


class HookRunner(threading.Thread):
    def __init__(self, hooks: tuple[Hook, ...], stopping: threading.Event) -> None:
        super().__init__(name="ckpt-hooks", daemon=True)
        self.hooks = hooks  # replaced on reload
        self.stopping = stopping
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=QUEUE_SIZE)
        self.ran = 0
        self.failed = 0  # failed, timed out, could not start, or dropped
        self._child: subprocess.Popen[bytes] | None = None

    def wanted(self, name: str) -> bool:
        return any(name in hook.on for hook in self.hooks)

    def emit(self, name: str, **fields: Any) -> bool:
        """Queue `name` for the hooks that listen to it; never blocks, never raises. Returns
        whether it was queued (False: no hook listens, or the queue is full)."""
        if not self.wanted(name):
            return False
        document = hook_document(name, at=iso_utc(time.time()), **fields)
        try:
            self.queue.put_nowait(document)
        except queue.Full:
            self.failed += 1
            event("hook_dropped", level=logging.WARNING, hook_event=name, queued=QUEUE_SIZE)
            return False
        return True

    def disk_pressure(self, root: str, free_bytes: int, min_free_bytes: int, reason: str) -> bool:
        """For the disk guard: free space of `root` fell below its `min_free`."""
        return self.emit(
            "disk_pressure",
            path=root,
            metric="free_bytes",
            value=float(free_bytes),
            reason=reason,
            min_free_bytes=min_free_bytes,
        )

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                document = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            for hook in self.hooks:
                if document["event"] in hook.on and not self.stopping.is_set():
                    self._run(hook, document)

    def _run(self, hook: Hook, document: dict[str, Any]) -> None:
        payload = json.dumps(document, allow_nan=False, default=str).encode()
        started = time.monotonic()
        try:
            child = subprocess.Popen(
                list(hook.command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: killed whole on a timeout
                close_fds=True,
            )
        except OSError as exc:
            self._failed(hook, document, f"cannot start: {exc}")
            return
        self._child = child
        try:
            out, err = _exchange(child, payload, hook.timeout)
        except subprocess.TimeoutExpired:
            _kill(child)
            self._failed(hook, document, f"timed out after {hook.timeout:g}s (killed)")
            return
        finally:
            self._child = None
        self.ran += 1
        if child.returncode != 0:
            said = err.strip() or out.strip()  # what it said last, on stderr or else on stdout
            last = said.decode("utf-8", "replace").splitlines()
            tail = f": {last[-1]}" if last else ""
            self._failed(hook, document, f"exited {child.returncode}{tail}")
            return
        event(
            "hook_ran",
            level=logging.DEBUG,
            hook_event=document["event"],
            command=hook.command[0],
            seconds=round(time.monotonic() - started, 3),
        )

    def _failed(self, hook: Hook, document: dict[str, Any], why: str) -> None:
        self.failed += 1
        event(
            "hook_failed",
            level=logging.WARNING,
            hook_event=document["event"],
            command=hook.command[0],
            path=document.get("path"),
            error=why,
        )

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """After `stopping` is set: the running hook gets `grace` seconds, then is killed."""
        self.join(timeout=grace)
        child = self._child
        if child is not None and child.poll() is None:
            _kill(child)
        self.join(timeout=STOP_GRACE_SECONDS)


def _exchange(
    child: subprocess.Popen[bytes], payload: bytes, timeout: float
) -> tuple[bytes, bytes]:
    """Feed `payload` to the child's stdin and read its stdout and stderr to their ends in
    `_READ_CHUNK` pieces, keeping only the last `OUTPUT_LIMIT` bytes of each (memory stays
    bounded whatever it writes); then wait for it. TimeoutExpired past `timeout` seconds."""
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    deadline = time.monotonic() + timeout
    out, err, stdin = child.stdout.fileno(), child.stderr.fileno(), child.stdin.fileno()
    tails = {out: bytearray(), err: bytearray()}
    pending = memoryview(payload)
    os.set_blocking(stdin, False)  # a hook that reads slowly must not block past the deadline
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(stdin, selectors.EVENT_WRITE)
            for fd in tails:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(child.args, timeout)
                for key, _events in selector.select(left):
                    if key.fd == stdin:
                        pending = _feed(stdin, pending)
                        if not pending:
                            selector.unregister(stdin)
                            child.stdin.close()
                        continue
                    data = os.read(key.fd, _READ_CHUNK)
                    if not data:
                        selector.unregister(key.fd)
                        continue
                    tail = tails[key.fd]
                    tail += data
                    del tail[:-OUTPUT_LIMIT]
        child.wait(timeout=max(deadline - time.monotonic(), 0.0))
    finally:
        for pipe in (child.stdin, child.stdout, child.stderr):
            pipe.close()
    return bytes(tails[out]), bytes(tails[err])


def _feed(stdin: int, pending: memoryview) -> memoryview:
    """What is left of `pending` after one write to the hook's (non-blocking) stdin."""
    try:
        return pending[os.write(stdin, pending) :]
    except BlockingIOError:
        return pending
    except OSError:  # it exited or closed its stdin unread: nothing more to feed
        return pending[:0]


def _kill(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it ended meanwhile
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


class Notifications:
    """What the worker and the jobs thread tell the hooks: decisions of which event a scan
    report, a verify or a prune means, and its fields."""

    def __init__(self, hooks: HookRunner, store: Store, config: Callable[[], Config]) -> None:
        self.hooks, self.store, self.config = hooks, store, config

    def scanned(self, report: ScanReport) -> None:
        for path, status, reason in new_failures(report):
            if status == CheckpointStatus.CORRUPT.value:
                self.corrupt(path, reason)
            elif status == CheckpointStatus.ABANDONED.value:  # once: then it is settled
                self.save_failed(path, reason)
        if not self.hooks.wanted("new_best"):
            return
        for path in report.indexed:
            try:
                self._new_best(path)
            except Exception as exc:  # a catalog hiccup must not cost the worker its scan
                event("hook_error", level=logging.WARNING, path=path, error=str(exc))

    def _new_best(self, path: str) -> None:
        c = self.store.reads.get(path)
        if c.status != CheckpointStatus.OK:
            return
        policy, _ = self.config().policy_for(c.root, c.run)
        rules = policy.keep_best if policy else ()
        metric = monitored_metric([b.metric for b in rules], c.metrics)
        value = c.metrics.get(metric) if metric else None
        if metric is None or value is None:
            return
        mode = next((b.mode for b in rules if b.metric == metric and b.mode), None)
        mode = mode or default_mode(metric)
        other = self.store.usage.run_best_other(c.id, metric, mode)
        if is_better(value, other, mode):
            reason = f"previous best {other:g}" if other is not None else "first of its run"
            self.hooks.emit(
                "new_best", path=c.path, run=c.run, metric=metric, value=value, reason=reason
            )

    def corrupt(self, path: str, reason: str) -> None:
        self._with_run("corrupt", path, reason)

    def save_failed(self, path: str, reason: str) -> None:
        """A folder save judged abandoned: nobody will finish it (orbax#605: nothing else says)."""
        self._with_run("save_failed", path, reason)

    def _with_run(self, name: str, path: str, reason: str) -> None:
        if not self.hooks.wanted(name):
            return
        try:  # the row was just written: its run, as `new_best` and `retention` give it
            run: str | None = self.store.reads.get(path).run
        except Exception as exc:  # a catalog hiccup: the event still goes, without its run
            event("hook_error", level=logging.WARNING, path=path, error=str(exc))
            run = None
        self.hooks.emit(name, path=path, run=run, reason=reason)

    def retention(self, path: str, run: str, action: str, reason: str) -> None:
        self.hooks.emit("retention", path=path, run=run, reason=reason, action=action)

    def tiered(self, checkpoint_id: int, path: str, run: str, reason: str) -> None:
        """A checkpoint's bytes went to the object store (verified; its local copy trashed):
        `remote_url` and `bytes` of its verified copy."""
        if not self.hooks.wanted("tiered"):
            return
        from ..core.remote import verified_copy

        try:
            copy = verified_copy(self.store.remote.remote_copies([checkpoint_id]))
        except Exception as exc:  # a catalog hiccup: the event still goes, without its URL
            event("hook_error", level=logging.WARNING, path=path, error=str(exc))
            copy = None
        self.hooks.emit(
            "tiered",
            path=path,
            run=run,
            reason=reason,
            remote_url=copy.url if copy else None,
            bytes=copy.size_bytes if copy else None,
        )
