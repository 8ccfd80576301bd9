"""Session fixtures shared by all tests: real Keras/TensorFlow checkpoints + ground truth.

TensorFlow and Keras are never imported into the pytest process: the checkpoints are written
by ``tests/keras_fixtures.py`` in child processes. Set ``CKPT_TEST_FIXTURES=/some/dir`` to
reuse one generated set across runs (it is generated there once, if the directory is absent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GENERATOR = Path(__file__).with_name("keras_fixtures.py")
GENERATE_TIMEOUT_S = 600


def _generate(out: Path) -> Path:
    cmd = [sys.executable, str(GENERATOR), str(out)]
    try:
        subprocess.run(cmd, check=True, timeout=GENERATE_TIMEOUT_S, capture_output=True, text=True)
        return out
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        error = exc
    streams = (("stdout", error.stdout), ("stderr", error.stderr))
    output = "\n".join(
        f"--- {name} ---\n{text if isinstance(text, str) else (text or b'').decode()}"
        for name, text in streams
    )
    pytest.fail(f"fixture generation failed: {error}\n{output}", pytrace=False)


@pytest.fixture(scope="session")
def keras_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of real checkpoints; ``manifest.json`` in it holds the ground truth."""
    reuse = os.environ.get("CKPT_TEST_FIXTURES")
    if reuse:
        out = Path(reuse).resolve()
        if (out / "manifest.json").is_file():
            return out
        if not out.exists():
            return _generate(out)
        pytest.fail(
            f"CKPT_TEST_FIXTURES={reuse} exists but has no manifest.json (an interrupted or"
            " failed generation?); delete it or point the variable at a new directory",
            pytrace=False,
        )
    return _generate(tmp_path_factory.mktemp("keras"))


@pytest.fixture(scope="session")
def manifest(keras_checkpoints: Path) -> dict[str, dict[str, Any]]:
    """Ground truth: {path relative to keras_checkpoints: expected metadata}."""
    return json.loads((keras_checkpoints / "manifest.json").read_text())


# ---- the CLI as users run it: a subprocess, a config file, a real SQLite catalog ----

TEMPLATES = [
    "e{epoch:02d}-vl{val_loss:.3f}.keras",
    "w.{epoch:02d}.weights.h5",
    "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
    "ckpt-{step}",
    "model.{epoch:02d}-{val_loss:.2f}.keras",  # examples/train_keras.py
]


class Workspace:
    """A root folder, a config file naming it, and a catalog in a state folder beside them."""

    def __init__(self, base: Path, settle_seconds: float = 0) -> None:
        self.base = base
        self.root = base / "runs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = base / "config.yaml"
        templates = "".join(f"\n      - {json.dumps(t)}" for t in TEMPLATES)
        self.config.write_text(
            f"state_dir: {base / 'state'}\n"
            f"roots:\n  - path: {self.root}\n    filename_template:{templates}\n"
            f"completion:\n  settle_seconds: {settle_seconds}\n"
        )

    def run(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(self.config), *args]
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **(env or {})},
            cwd=self.base,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def keras_root(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    """A workspace whose root holds a copy of every generated Keras/TF checkpoint."""
    import shutil

    for part in ("k3", "tfk"):
        shutil.copytree(keras_checkpoints / part, workspace.root / part)
    return workspace


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    """One full scan of every generated checkpoint, shared by a module's read-only tests."""
    import shutil

    ws = Workspace(tmp_path_factory.mktemp("scanned"))
    for part in ("k3", "tfk"):
        shutil.copytree(keras_checkpoints / part, ws.root / part)
    ws.run("scan")
    return ws


# ---- `ckpt serve` as systemd runs it: a real subprocess, real signals ----


_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_daemon_outlives_its_test() -> Any:
    """A test that fails while a daemon runs must not leave it running."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Daemon:
    """A running `ckpt serve`; its stderr log is kept in a file for assertions."""

    def __init__(self, ws: Workspace, env: dict[str, str] | None = None) -> None:
        import time

        self.ws = ws
        self.log_path = ws.base / f"serve-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in wait()
        cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "serve"]
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=self._log, cwd=ws.base, env={**os.environ, **(env or {})}
        )
        _STARTED.append(self.proc)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = 60) -> None:
        self.wait_until(lambda: text in self.log, timeout, f"{text!r} in the log")

    def wait_until(self, condition: Any, timeout: float = 60, what: str = "condition") -> None:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}\n{self.log}")
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}\n{self.log}")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def stop(self) -> int:
        import signal

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


@pytest.fixture
def daemon_ws(tmp_path: Path) -> Any:
    """A service workspace and a started daemon (stopped, exit code checked, at teardown)."""
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    yield ws, daemon
    if daemon.proc.poll() is None:
        assert daemon.stop() == 0, daemon.log


ZIP_RUN = "k3/run_zip"
ZIP_FILES = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]


def zip_run(ws: Workspace, fixtures: Path, *extra: tuple[str, str]) -> Workspace:
    """The three real epoch checkpoints of k3/run_zip (val_loss falling) copied into the root,
    plus (fixture path, name in the run) `extra` files; scanned."""
    import shutil

    run = ws.root / ZIP_RUN
    run.mkdir(parents=True)
    for name in ZIP_FILES:
        shutil.copy2(fixtures / ZIP_RUN / name, run / name)
    for source, name in extra:
        shutil.copy2(fixtures / source, run / name)
    ws.run("scan")
    return ws
