"""The service while its catalog's disk is full: up, saying so, retrying, resuming by itself.

A catalog write that fails for lack of space (`catalog.space.disk_full`) is not the service's
end: at start (opening the catalog, registering, the first reconcile) the step is tried again
every `RETRY_SECONDS` until space returns, systemd told why the start takes longer; while
running, the worker keeps its loop and, once a write works again, walks every root (what was
saved meanwhile gets indexed: hints taken while full were lost with their failed writes). The
state is logged once as it starts (`event=catalog_disk_full`) and once as it ends
(`event=catalog_space_back`), shown in systemd's STATUS= and as the metric
`ckpt_catalog_disk_full`; `ckpt status` measures the catalog's free space itself (the daemon
cannot write its heartbeat meanwhile)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from ..catalog.space import disk_full
from ..logs import event
from ..settings.config import sqlite_file

RETRY_SECONDS = 5.0
T = TypeVar("T")


class CatalogFull:
    """Whether the catalog at `url` is out of space now (`reason`), as the service last found."""

    def __init__(self, url: str, tell: Callable[[str], object] = lambda _status: None) -> None:
        self.file = sqlite_file(url)  # None: a server's catalog
        self.tell = tell  # systemd's STATUS= (and, at start, more time to start)
        self.reason: str | None = None
        self._since = 0.0
        self._lock = threading.Lock()  # the worker and the jobs thread may both meet it

    @property
    def full(self) -> bool:
        return self.reason is not None

    def check(self, exc: BaseException, during: str) -> bool:
        """Whether `exc` is the catalog's disk being full: then the state is entered (logged
        the first time) and True; else False, the caller's error as before."""
        reason = disk_full(exc, self.file)
        if reason is None:
            return False
        with self._lock:
            first, self.reason = self.reason is None, reason
            if first:
                self._since = time.monotonic()
        if first:
            event("catalog_disk_full", level=logging.ERROR, during=during, reason=reason)
        self.tell(f"waiting for space: {reason}")
        return True

    def cleared(self) -> bool:
        """A catalog write just worked: True (and logged) if it was full until now."""
        with self._lock:
            if self.reason is None:
                return False
            self.reason = None
            waited = time.monotonic() - self._since
        event("catalog_space_back", waited_seconds=round(waited, 1))
        return True

    def attempt(self, during: str, action: Callable[[], T], stopping: threading.Event) -> T | None:
        """`action()` until it works; tried again every `RETRY_SECONDS` while it fails for lack
        of space on the catalog's disk (any other error raises). None if the service is asked to
        stop meanwhile."""
        while True:
            try:
                result = action()
            except Exception as exc:
                if not self.check(exc, during):
                    raise
                if stopping.wait(RETRY_SECONDS):
                    return None
                continue
            self.cleared()
            return result
