"""Issue 11: SIGKILL of the daemon while it copies a generation it keeps leaves no half version,
and the next start finishes the capture (the file still holds that generation) with a verified
copy. The kill is observed, not assumed: the daemon is killed only once its temp copy exists in
`.ckpt-versions/`, and that temp is still there after the kill."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.support import Daemon
from tests.support.daemon import service_workspace

pytestmark = pytest.mark.slow
BIG_FLOATS = 64 << 20  # 256 MB of float32: copy + verify take about a second here
ATTEMPTS = 3


def big_weights(path: Path, fill: float) -> None:
    """A Keras 3 `.weights.h5` whose one kernel is 256 MB, written elsewhere, moved into place
    (as Keras's own saves finish: the watcher sees the rename)."""
    tmp = path.parent.parent / f"{path.name}.tmp-outside"
    with h5py.File(tmp, "w") as f:
        kernel = f.create_dataset("layers/dense/vars/0", (BIG_FLOATS,), "float32")
        block = np.full(16 << 20, fill, "float32")
        for start in range(0, BIG_FLOATS, block.size):
            kernel[start : start + block.size] = block
        f["layers/dense/vars"].create_dataset("1", data=np.zeros(2, "float32"))
        f.create_group("vars")
    os.replace(tmp, path)


def temps(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".ckpt-tmp-*")] if folder.exists() else []


def test_sigkill_during_a_version_copy_leaves_no_half_version(tmp_path: Path) -> None:
    ws = service_workspace(tmp_path)
    run = ws.root / "job"
    run.mkdir()
    best, kept = run / "best.weights.h5", ws.root / ".ckpt-versions" / "job"
    for attempt in range(ATTEMPTS):
        daemon = Daemon(ws)
        daemon.wait_for_log("event=ready")
        big_weights(best, float(attempt + 1))
        deadline = time.monotonic() + 300
        while not temps(kept) and not list(kept.glob(f"best.v{attempt + 1}.*")):
            assert time.monotonic() < deadline, daemon.log
            time.sleep(0.005)
        if temps(kept):
            daemon.signal(signal.SIGKILL)
            daemon.wait()
            break
        daemon.stop()  # the copy finished before it was seen: a new generation, once more
    else:
        pytest.fail(f"no copy was caught in flight in {ATTEMPTS} attempts")
    generation = attempt + 1
    assert temps(kept), "the kill came after the copy"
    assert not (kept / f"best.v{generation}.weights.h5").exists()  # no half version by name

    daemon = Daemon(ws)  # the start's reconcile scan removes our dead temp and captures anew
    daemon.wait_for_log("event=ready")
    version = kept / f"best.v{generation}.weights.h5"
    daemon.wait_until(lambda: version.exists() and not temps(kept), 300, "the capture")
    daemon.wait_until(lambda: "event=version_kept" in daemon.log, 60, "its row")
    daemon.stop()
    assert version.read_bytes() == best.read_bytes()
    doc = json.loads(ws.run("show", str(best), "--json").stdout)
    rows = [v for v in doc["versions"] if v["generation"] == generation]
    assert len(rows) == 1 and rows[0]["current"] and rows[0]["hash"] == doc["hash"]
    assert rows[0]["path"] == str(version)
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        f"best.v{g}.weights.h5" for g in range(1, generation + 1)
    )
