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
