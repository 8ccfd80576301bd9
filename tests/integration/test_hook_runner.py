"""`service.hooks.HookRunner` with real commands: the JSON on stdin, a hung hook killed whole at
its timeout, failures one log line each, the callers never blocked (a bounded queue), and a
stop that does not wait for a slow hook."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from ckpt_daemon.service.hooks import QUEUE_SIZE, HookRunner
from ckpt_daemon.settings.operations import Hook


def writer(out: Path) -> tuple[str, ...]:
    code = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    return (sys.executable, "-c", code)


def wait_for(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_hung_hook_is_killed_and_the_next_one_still_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, pidfile = tmp_path / "out.jsonl", tmp_path / "pid"
    hung = ("/bin/sh", "-c", f"echo $$ > {pidfile}; sleep 60 & echo $! >> {pidfile}; wait")
    failing = (sys.executable, "-c", "import sys; sys.stderr.write('first\\nboom\\n'); exit(3)")
    stopping = threading.Event()
    runner = HookRunner(
        (
            Hook(("corrupt",), hung, timeout=0.5),
            Hook(("corrupt",), failing),
            Hook(("corrupt",), ("/nonexistent/notify",)),
            Hook(("corrupt", "new_best"), writer(out)),
        ),
        stopping,
    )
    caplog.set_level(logging.INFO)
    runner.start()
    try:
        assert runner.emit("corrupt", path="/r/x.h5", reason="bit rot")
        assert not runner.emit("retention", path="/r/y.h5")  # no hook listens
        wait_for(lambda: out.exists() and out.read_text().strip())
        doc = json.loads(out.read_text())
        assert doc["event"] == "corrupt" and doc["path"] == "/r/x.h5"
        assert doc["reason"] == "bit rot" and doc["at"].endswith("Z")
        pids = [int(p) for p in pidfile.read_text().split()]
        wait_for(lambda: not any(alive(p) for p in pids), 10)  # the whole group, grandchild too
        assert runner.failed == 3 and runner.ran == 2
        failures = [r for r in caplog.records if r.getMessage() == "hook_failed"]
        errors = [r.__dict__["fields"]["error"] for r in failures]
        assert errors[0] == "timed out after 0.5s (killed)"
        assert errors[1] == "exited 3: boom"
        assert errors[2].startswith("cannot start: ")
        assert runner.is_alive()
    finally:
        stopping.set()
        runner.stop()


def test_emit_never_blocks_and_drops_beyond_the_bound(tmp_path: Path) -> None:
    runner = HookRunner((Hook(("new_best",), writer(tmp_path / "o")),), threading.Event())
    started = time.monotonic()  # not started: nothing drains the queue
    assert all(runner.emit("new_best", path=f"/r/{i}.keras") for i in range(QUEUE_SIZE))
    assert not runner.emit("new_best", path="/r/dropped.keras")
    assert time.monotonic() - started < 5
    assert runner.failed == 1 and runner.queue.qsize() == QUEUE_SIZE


def test_disk_pressure_is_ready_for_the_disk_guard(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    stopping = threading.Event()
    runner = HookRunner((Hook(("disk_pressure",), writer(out)),), stopping)
    runner.start()
    try:
        assert runner.disk_pressure("/r", 1000, 5000, "below min_free")
        wait_for(lambda: out.exists() and out.read_text().strip())
        doc = json.loads(out.read_text())
        assert (doc["event"], doc["path"], doc["metric"], doc["value"]) == (
            "disk_pressure",
            "/r",
            "free_bytes",
            1000.0,
        )
        assert doc["min_free_bytes"] == 5000 and doc["reason"] == "below min_free"
    finally:
        stopping.set()
        runner.stop()


def test_stop_does_not_wait_for_a_slow_hook(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    slow = ("/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 120")
    stopping = threading.Event()
    runner = HookRunner((Hook(("retention",), slow, timeout=600),), stopping)
    runner.start()
    runner.emit("retention", path="/r/x.keras")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    started = time.monotonic()
    stopping.set()
    runner.stop(grace=0.5)
    assert time.monotonic() - started < 30  # the grace, then killed (not its 600 s timeout)
    assert not runner.is_alive()
    assert not alive(int(pidfile.read_text()))
