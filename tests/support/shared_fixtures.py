"""Expensive generated fixtures made once per session for every pytest-xdist worker.

Each worker used to generate its own set of the real Keras/TF checkpoints, training runs and
torch files: the same minutes of TensorFlow twice on a 2-core machine. `generated_once` makes a
set in the session's temporary root that all workers share (xdist gives each worker
`<root>/popen-gwN`; `<root>` is the session's), under an exclusive `flock`: the first worker
to ask generates it, the others wait for it, then all read it (tests treat these sets as
read-only, as they treat `CKPT_TEST_FIXTURES`). A generation that fails leaves no mark of
completion: the next worker to ask tries again, and fails the same way.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every worker of this session shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def generated_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]
) -> Path:
    """`<session root>/shared-<name>`, made by `make(folder)` by the first worker that asks."""
    root = session_root(tmp_path_factory)
    out, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with exclusive(root / f"shared-{name}.lock"):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # a failed attempt's leftovers
            out.mkdir(parents=True)
            make(out)
            done.write_text("")
    return out
