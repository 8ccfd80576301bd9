"""The thread-leak check (tests/support/thread_leaks.py, autouse in conftest.py) can fail: it
names a non-daemon thread and a daemon thread of ours left running, waits for one that is
stopping, and lets a third-party daemon thread be."""

from __future__ import annotations

import threading
import time

from tests.support import thread_leaks


def test_a_running_non_daemon_thread_and_a_daemon_thread_of_ours_are_named() -> None:
    before = thread_leaks.snapshot()
    stop = threading.Event()
    plain = threading.Thread(target=stop.wait, name="left-plain", daemon=False)
    ours = threading.Thread(target=lambda: stop.wait(), name="left-ours", daemon=True)
    foreign = threading.Thread(target=time.sleep, args=(30,), name="foreign", daemon=True)
    for thread in (plain, ours, foreign):
        thread.start()
    try:
        left = thread_leaks.leaked(before, grace_s=0.2)
        assert sorted(left) == [
            "left-ours (tests.unit.test_thread_leaks, daemon)",
            "left-plain (threading, non-daemon)",
        ], left
    finally:
        stop.set()
        plain.join(5)
        ours.join(5)
    assert thread_leaks.leaked(before, grace_s=5) == []  # `foreign` still sleeps: not ours


def test_a_thread_that_is_stopping_gets_its_grace() -> None:
    before = thread_leaks.snapshot()
    threading.Thread(target=time.sleep, args=(0.5,), name="stopping", daemon=False).start()
    assert thread_leaks.leaked(before, grace_s=10) == []
