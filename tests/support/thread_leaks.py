"""No test leaves a thread running: a non-daemon thread (it would keep the interpreter alive),
or one of ours at all (`ckpt_daemon`'s workers and guards, the tests' own helpers, and the
watchdog observers and APScheduler loops only our code starts), even a daemon one.

`conftest.py` checks it around every test (after its function fixtures are torn down) and
around every module (after its module fixtures are). A thread that is stopping is given
`GRACE_S` to finish; one still running after that fails the test with its name and the module
of the code it runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

GRACE_S = 10.0  # a loaded 2-core machine: a stopped worker may take a while to return
# Whose threads are ours: started by these packages' code (their class or target lives there).
OURS = ("ckpt_daemon", "tests", "watchdog", "apscheduler")


def snapshot() -> set[threading.Thread]:
    return set(threading.enumerate())


def origin(thread: threading.Thread) -> str:
    """The module of the code the thread runs: its target's, else its class's."""
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", None) if target is not None else None
    return module or type(thread).__module__


def is_ours(thread: threading.Thread) -> bool:
    module = origin(thread)
    return any(module == name or module.startswith(f"{name}.") for name in OURS)


def leaked(before: Iterable[threading.Thread], grace_s: float = GRACE_S) -> list[str]:
    """Threads started since `before` that still run after `grace_s`: non-daemon ones, and ours
    of any kind. Each as "name (module, daemon)"."""
    known = set(before)
    deadline = time.monotonic() + grace_s
    while True:
        left = [
            t
            for t in threading.enumerate()
            if t not in known and t.is_alive() and (not t.daemon or is_ours(t))
        ]
        if not left or time.monotonic() >= deadline:
            break
        left[0].join(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
    return [f"{t.name} ({origin(t)}, {'daemon' if t.daemon else 'non-daemon'})" for t in left]


def assert_none_left(before: Iterable[threading.Thread], what: str) -> None:
    left = leaked(before)
    assert not left, f"threads still running after {what}: {', '.join(left)}"
