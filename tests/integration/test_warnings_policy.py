"""The suite's warning policy (pyproject's `filterwarnings`) as a test run sees it: a warning
fails its test, and a failing property test is reported as a failure with its falsifying
example, not as an INTERNALERROR (Hypothesis writes the example as a patch with libcst, whose
import warns under mypy_extensions 1.2; as an error, that killed the xdist worker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CASES = """
import warnings
from hypothesis import given, strategies as st

def test_a_warning() -> None:
    warnings.warn("old", DeprecationWarning)

@given(st.integers())
def test_a_property(x: int) -> None:
    assert x < 5
"""


def test_a_warning_fails_and_a_failing_property_reports_its_example(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"),
            "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-n", "0", "-q",
            str(tmp_path / "test_cases.py"),
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out  # 1: tests failed (3 would be an internal error)
    assert "INTERNALERROR" not in out, out
    assert "FAILED test_cases.py::test_a_warning - DeprecationWarning: old" in out, out
    assert "FAILED test_cases.py::test_a_property" in out, out
    assert "Falsifying example: test_a_property(" in out, out
