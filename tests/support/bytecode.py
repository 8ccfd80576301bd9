"""Compiled bytecode for the package and the test helpers, written once before the tests start.

Every CLI command, daemon and child in the suite is a new Python process that imports the
package. Where PYTHONDONTWRITEBYTECODE is set (it is in this machine kind's environment, and
so in CI), no process writes `__pycache__`, and each one compiles the ~130 modules it imports
from source again: about 0.15 s of CPU per process, thousands of times. Python still *reads*
bytecode it finds, so compiling once here (compileall writes regardless of the flag) gives
every later process the cached modules; a source edited later is recompiled as usual (its
timestamp no longer matches). The flag is also dropped from the environment the workers and
their processes inherit: each worker would otherwise rewrite and compile every test module
again at collection (pytest's assertion rewriting caches its bytecode the same way).
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("daemon", "tests/support", "migrations")


def compile_once() -> None:
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for folder in FOLDERS:
        compileall.compile_dir(REPO / folder, quiet=1, workers=1)
