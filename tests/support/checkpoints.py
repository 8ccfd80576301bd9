"""The real Keras/TensorFlow checkpoints the tests read: generated once per session by
`keras_fixtures.py` in child processes (TensorFlow never enters the pytest process; one set for
every xdist worker: `shared_fixtures`), or reused
from the folder named by ``CKPT_TEST_FIXTURES`` (generated there once, if it is absent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .shared_fixtures import exclusive, generated_once

GENERATOR = Path(__file__).with_name("keras_fixtures.py")
GENERATE_TIMEOUT_S = 600
FIXTURES_ENV = "CKPT_TEST_FIXTURES"


def generate(out: Path) -> Path:
    """Run the generator into `out`; fail the session with its output if it fails."""
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


def checkpoints_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of generated checkpoints; its ``manifest.json`` holds the ground truth."""
    reuse = os.environ.get(FIXTURES_ENV)
    if reuse:
        out = Path(reuse).resolve()
        if (out / "manifest.json").is_file():
            return out
        with exclusive(out.parent / f".{out.name}.lock"):  # two workers: one generates it
            if (out / "manifest.json").is_file():
                return out
            if not out.exists():
                return generate(out)
        pytest.fail(
            f"{FIXTURES_ENV}={reuse} exists but has no manifest.json (an interrupted or"
            " failed generation?); delete it or point the variable at a new directory",
            pytrace=False,
        )
    return generated_once(tmp_path_factory, "keras", generate)
