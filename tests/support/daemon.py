"""`ckpt serve` as systemd runs it: a real subprocess, real signals, its log in a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .forked_cli import ForkedProcess, ckpt_start
from .workspace import Workspace

# Every daemon started, so that a test that fails while one runs does not leave it running.
_STARTED: list[Daemon] = []


def kill_started() -> None:
    """Kill (and reap) every daemon started so far that still runs; close every one's log
    (a daemon a test killed and reaped itself has it open still)."""
    while _STARTED:
        daemon = _STARTED.pop()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        daemon.wait()


class Daemon:
    """A running `ckpt serve`; its stderr log is kept in a file for assertions."""

    def __init__(
        self,
        ws: Workspace,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
        *,
        shared: bool = False,
    ) -> None:
        """`wrap`: argv that execs the daemon's argv appended to it in the same process (a
        private mount/UTS namespace: `unshare ... sh -c '...; exec "$@"' sh`). `shared`: a
        module fixture's daemon, serving several tests: the fixture stops (or kills) it, not
        the end of each test."""
        self.ws = ws
        self.log_path = ws.base / f"serve-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in wait()
        environment = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if wrap:
            cmd = [*wrap, sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "serve"]
            self.proc = subprocess.Popen(
                cmd, stdout=self._log, stderr=self._log, cwd=ws.base, env=environment
            )
        else:  # forked from the tests' pre-imported CLI (support/forked_cli.py)
            args = ["--config", str(ws.config), "serve"]
            self.proc = ckpt_start(args, output=self._log.fileno(), env=environment, cwd=ws.base)
        if not shared:
            _STARTED.append(self)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = 60) -> None:
        self.wait_until(lambda: text in self.log, timeout, f"{text!r} in the log")

    def wait_until(self, condition: Any, timeout: float = 60, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            asked = time.monotonic()
            if condition():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}\n{self.log}")
            # A condition that runs a CLI command (most do) is asked again after as long as it
            # took (1 s at most), not every 0.1 s: polls must not keep two cores busy.
            time.sleep(min(1.0, max(0.1, time.monotonic() - asked)))
        raise AssertionError(f"timed out waiting for {what}\n{self.log}")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait()


def service_workspace(base: Path, extra: str = "") -> Workspace:
    """A workspace tuned for service tests: quick completion, frequent heartbeats, no rescans."""
    ws = Workspace(base, settle_seconds=1)
    ws.config.write_text(
        ws.config.read_text().replace(
            "settle_seconds: 1", "settle_seconds: 1\n  min_age_seconds: 0.2"
        )
        + "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
        + extra
    )
    return ws
