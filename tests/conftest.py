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
        cmd = [sys.executable, "-m", "daemon", "--config", str(self.config), *args]
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
