"""Filesystem events → hints on the worker's queue. The only module that imports watchdog.

Handlers only translate and enqueue: they never open files, touch the catalog or raise (an
exception inside a watchdog handler silently kills its observer thread). Events are hints; the
scheduled rescan is the truth, and an inotify queue overflow asks for one at once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from ..core.model import Hint, HintKind
from ..fs import mounts
from ..logs import event
from ..settings.config import RootConfig
from ..usecases.storage import root_storage

Sink = Callable[[Hint], None]
_INOTIFY_LOGGER = "watchdog.observers.inotify_c"
_MAX_WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")


def hints_from(event_type: str, src: str, dest: str, is_dir: bool) -> Iterator[Hint]:
    """What one watchdog event says (pure)."""
    if event_type == "closed":
        yield Hint(src, HintKind.CLOSED, is_dir)
    elif event_type == "moved":
        yield Hint(src, HintKind.DELETED, is_dir)
        yield Hint(dest, HintKind.MOVED, is_dir)
    elif event_type in ("created", "modified") and not (is_dir and event_type == "modified"):
        # A folder's own "modified" only echoes a change to one of its entries.
        yield Hint(src, HintKind.CHANGED, is_dir)
    elif event_type == "deleted":
        yield Hint(src, HintKind.DELETED, is_dir)


class _Handler(FileSystemEventHandler):
    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    def on_any_event(self, ev: FileSystemEvent) -> None:
        try:
            src, dest = os.fsdecode(ev.src_path), os.fsdecode(ev.dest_path or "")
            for hint in hints_from(ev.event_type, src, dest, ev.is_directory):
                self._sink(hint)
        except Exception:  # never let an exception kill the observer thread
            logging.getLogger("ckpt").exception("watch handler failed")


class _OverflowAlarm(logging.Handler):
    """watchdog only logs an inotify queue overflow: turn that log line into a rescan."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(logging.WARNING)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self._sink(Hint("", HintKind.OVERFLOW))


@dataclass(frozen=True)
class Watch:
    root: RootConfig
    kind: str  # inotify | polling
    observer: BaseObserver
    storage: dict[str, Any]  # usecases.storage.root_storage: filesystem, events, trash


class Watcher:
    def __init__(self, roots: tuple[RootConfig, ...], sink: Sink) -> None:
        self._roots = roots
        self._sink = sink
        self._watches: list[Watch] = []
        self._alarm = _OverflowAlarm(sink)

    def start(self) -> None:
        logging.getLogger(_INOTIFY_LOGGER).addHandler(self._alarm)
        for root in self._roots:
            self._watches.append(self._watch(root))

    def _watch(self, root: RootConfig) -> Watch:
        kind = choose_observer(root)
        if kind == "inotify":
            shortfall = watch_limit_shortfall(root.path)
            if shortfall:
                event("watch_limit", level=logging.WARNING, root=root.path, reason=shortfall)
                kind = "polling"
        try:
            return self._started(root, kind)
        except OSError as exc:  # ENOSPC / EMFILE: the inotify limits of this user
            reason = (
                f"{exc}: raise fs.inotify.max_user_watches / max_user_instances "
                "(sysctl); polling this root meanwhile"
            )
            event("watch_limit", level=logging.WARNING, root=root.path, reason=reason)
            self._sink(Hint(str(root.path), HintKind.OVERFLOW))
            return self._started(root, "polling")

    def _started(self, root: RootConfig, kind: str) -> Watch:
        observer: BaseObserver = (
            PollingObserver(timeout=root.poll_interval) if kind == "polling" else Observer()
        )
        observer.schedule(_Handler(self._sink), str(root.path), recursive=True)
        observer.daemon = True
        observer.start()
        storage = root_storage(root)
        fs, trash = storage["filesystem"], storage["trash"]
        event("watching", root=root.path, observer=kind, filesystem=fs, trash=trash)
        return Watch(root, kind, observer, storage)

    def stop(self) -> None:
        logging.getLogger(_INOTIFY_LOGGER).removeHandler(self._alarm)
        for watch in self._watches:
            watch.observer.stop()
        for watch in self._watches:
            watch.observer.join(timeout=10)
        self._watches = []

    def healthy(self) -> bool:
        return all(w.observer.is_alive() for w in self._watches)

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "path": str(w.root.path),
                "observer": w.kind,
                **{k: w.storage[k] for k in ("filesystem", "events", "trash")},
            }
            for w in self._watches
        ]


def choose_observer(root: RootConfig) -> str:
    """`auto` means polling where inotify events cannot arrive (`fs.mounts`: a network or
    cluster filesystem, a FUSE mount: inotify sees no other host's, no FUSE daemon's writes)."""
    if root.observer != "auto":
        return root.observer
    return "polling" if mounts.is_network(root.path) else "inotify"


def watch_limit_shortfall(path: Path) -> str | None:
    """A warning if the tree has more folders than this user may watch with inotify."""
    try:
        limit = int(_MAX_WATCHES.read_text())
    except (OSError, ValueError):
        return None
    for folders, _walked in enumerate(os.walk(path), start=1):
        if folders > limit:
            return (
                f"more than {limit} folders under {path}: raise fs.inotify.max_user_watches "
                "(sysctl -w fs.inotify.max_user_watches=N); polling this root meanwhile"
            )
    return None


class FileChanges:
    """Wakes `wait` when any of `names` in `folder` is written, created or moved onto (inotify
    on the folder alone: `ckpt wait` watching an SQLite catalog's file and its `-wal`)."""

    def __init__(self, folder: Path, names: set[str]) -> None:
        import threading

        self._event = threading.Event()
        self._names = names
        self._observer = Observer()
        touched = _Handler(lambda hint: self.touched(hint.path))
        self._observer.schedule(touched, str(folder), recursive=False)
        self._observer.daemon = True
        self._observer.start()

    def touched(self, path: str) -> None:
        if os.path.basename(path) in self._names:
            self._event.set()

    def wait(self, timeout_s: float) -> bool:
        """True once a change came within `timeout_s`; the next wait waits for a newer one."""
        got = self._event.wait(max(0.0, timeout_s))
        self._event.clear()
        return got

    def close(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)
