"""The real Keras/TensorFlow checkpoints the tests read: generated once per session by
`keras_fixtures.py` in child processes (TensorFlow never enters the pytest process; one set for
every xdist worker: `shared_fixtures`), or reused
from the folder named by ``CKPT_TEST_FIXTURES`` (generated there once, if it is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .shared_fixtures import exclusive, generated_once

GENERATOR = Path(__file__).with_name("keras_fixtures.py")
GENERATE_TIMEOUT_S = 600
FIXTURES_ENV = "CKPT_TEST_FIXTURES"


def generate(out: Path) -> Path:
    """Run the generator into `out` (its two children forked from `forked_python`'s zygote);
    fail the session if it fails (the children's output is the test's)."""
    from .keras_fixtures import run_children

    code = run_children(out)
    if code != 0:
        pytest.fail(f"fixture generation failed: keras_fixtures exited {code}", pytrace=False)
    return out


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
