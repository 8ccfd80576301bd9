"""The `tf_probe` child process that reads TF-native formats for us, one-shot or per scan.

TensorFlow is never imported into our own process: its import alone costs seconds and ~0.5 GB.
Inside `session()`, every probe goes to one long-lived child, so a scan pays that once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .. import python_module
from ..core.errors import CorruptCheckpoint, NotReady, ReadProblem, UnreadableCheckpoint
from .protocol import read_line

NO_TF_NOTE = (
    "TensorFlow not installed: variables not listed (pip install 'ckpt-daemon[tensorflow]')"
)
_PROBLEMS: dict[str, type[ReadProblem]] = {"missing": NotReady, "denied": UnreadableCheckpoint}


def tf_available() -> bool:
    """Whether TensorFlow is installed, without importing it."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def probe(mode: str, path: Path, timeout: float) -> dict[str, Any] | str:
    """The probe's JSON result, or a note saying why TF could not help.

    Raises CorruptCheckpoint when TF read the bytes and refused them, NotReady when a file
    vanished meanwhile, UnreadableCheckpoint when it was not allowed to read.
    """
    if not tf_available():
        return NO_TF_NOTE
    active = _Session.current
    result = active.ask(mode, path, timeout) if active else _one_shot(mode, path, timeout)
    if isinstance(result, dict) and "error" in result:
        problem = _PROBLEMS.get(str(result.get("problem")), CorruptCheckpoint)
        raise problem(str(result["error"]).splitlines()[0])
    return result


@contextmanager
def session() -> Iterator[None]:
    """Probes inside share one child, started at the first probe and stopped at the end."""
    if _Session.current is not None:
        yield
        return
    _Session.current = _Session()
    try:
        yield
    finally:
        current, _Session.current = _Session.current, None
        current.close()


def keep_session() -> None:
    """Start a session that outlives scans (the service's worker): close it with `end_idle`."""
    if _Session.current is None:
        _Session.current = _Session()


def end_idle(max_idle_seconds: float) -> None:
    """Stop the kept child once it has not been asked anything for `max_idle_seconds`
    (TensorFlow holds ~0.5 GB in it)."""
    current = _Session.current
    if current is not None and time.monotonic() - current.last_used >= max_idle_seconds:
        _Session.current = None
        current.close()


def _command(*args: str) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return [*python_module("children.tf_probe"), *args], env


def _one_shot(mode: str, path: Path, timeout: float) -> dict[str, Any] | str:
    cmd, env = _command(mode, str(path))
    try:
        done = subprocess.run(
            cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"TensorFlow probe failed: timed out after {timeout:g}s"
    except OSError as exc:
        return f"TensorFlow probe failed: {exc}"
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    return _parse(lines[-1] if lines else "", done.stderr, done.returncode)


def _parse(line: str, stderr: str, returncode: int | None) -> dict[str, Any] | str:
    try:
        result = json.loads(line) if line else None
    except ValueError:
        result = None
    if isinstance(result, dict):
        return result
    err = [ln for ln in stderr.splitlines() if ln.strip()]  # a traceback's last line says most
    return f"TensorFlow probe failed: {err[-1] if err else f'exit {returncode}'}"


class _Session:
    current: _Session | None = None

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self.last_used = time.monotonic()

    def ask(self, mode: str, path: Path, timeout: float) -> dict[str, Any] | str:
        self.last_used = time.monotonic()
        with self._lock:
            try:
                proc = self._running()
                assert proc.stdin is not None
                proc.stdin.write(f"{mode}\t{path}\n".encode())
                proc.stdin.flush()
                line = self._readline(proc, time.monotonic() + timeout)
            except (OSError, TimeoutError) as exc:
                return self._failed(f"{exc}")
            if line is None:
                return self._failed("")
            return _parse(line, "", None)

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            cmd, env = _command("serve")
            # Kept open for the life of the child, so a crash can be explained.
            self._stderr = tempfile.TemporaryFile(prefix="ckpt-tf-probe-")  # noqa: SIM115
            self._buffer = b""
            self._proc = subprocess.Popen(
                cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
            )
        return self._proc

    def _readline(self, proc: subprocess.Popen[bytes], deadline: float) -> str | None:
        line, self._buffer = read_line(proc, self._buffer, deadline)
        return line

    def _failed(self, why: str) -> dict[str, Any] | str:
        stderr = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            stderr = self._stderr.read().decode("utf-8", "replace")
        self.close(kill=True)  # the next probe starts a fresh child
        return _parse("", stderr if not why else f"{stderr}\n{why}", None)

    def close(self, *, kill: bool = False) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if kill:
                proc.kill()
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
