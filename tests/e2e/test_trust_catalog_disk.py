"""Issue 40 item 7: a full catalog disk does not stop the daemon. With the catalog alone on a
full 2 MiB tmpfs (a private mount namespace: support/catalog_disk_full.py), `ckpt serve` died
at start (`OperationalError: database or disk is full`, or SQLite's `disk I/O error` when it
cannot make its `-shm` file; exit 1, and systemd restarted it into the same). It must stay up,
say so (log, metric, `ckpt status`) and resume by itself when space returns, indexing what
was saved meanwhile. Real Keras checkpoints, a real filesystem filled to its last byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import catalog_disk_full

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace with a tmpfs")
    out = tmp_path_factory.mktemp("catalog-disk-full")
    driver = [sys.executable, catalog_disk_full.__file__, "--driver", str(out)]
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", *driver, str(keras_checkpoints)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    found = out / "results.json"
    assert found.exists(), done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(found.read_text())
    assert "error" not in doc, f"{doc['error']}\n{doc['log']}"
    return doc


def test_the_daemon_starts_on_a_full_catalog_disk_and_says_so(results: dict[str, Any]) -> None:
    start = results["at_start"]
    assert start["alive"], results["log"]
    assert "event=catalog_disk_full" in results["log"]
    assert start["status_exit"] == 0, start["status"]
    assert "no space left on the catalog's disk" in start["status"]["catalog_disk_full"]


def test_it_resumes_when_space_returns_and_indexes_what_came_meanwhile(
    results: dict[str, Any],
) -> None:
    assert "event=catalog_space_back" in results["log"]
    assert "event=ready" in results["log"]
    assert results["after_start"]["metric"] == 0.0
    listed = {row["path"]: row["status"] for row in results["list"]}
    assert listed == {path: "ok" for path in results["saved"]}, results["log"]


def test_a_disk_that_fills_while_it_runs_is_reported_then_waited_out(
    results: dict[str, Any],
) -> None:
    running = results["while_running"]
    assert running["alive"]
    assert running["metric"] == 1.0
    assert running["status_exit"] == 0
    assert running["status"]["catalog_disk_full"]
    assert results["after_running"]["metric"] == 0.0
    assert results["log"].count("event=catalog_disk_full") == 2  # once each time, not per retry
    assert results["exit"] == 0  # SIGTERM: a clean stop
