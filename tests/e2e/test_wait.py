"""`ckpt wait` and `Catalog.wait` on both catalog backends: a save indexed while the wait blocks
wakes it through the catalog's change feed (PostgreSQL NOTIFY, inotify + data_version on
SQLite), not through a periodic look; exit 6 at the timeout; the options' rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.api import open_catalog
from tests.support import ZIP_FILES, ZIP_RUN, Workspace

GENEROUS_S = 20.0  # a loaded 2-core machine; the strict number is bench/wait_latency.py's


def two_epochs(ws: Workspace, fixtures: Path, url: str) -> Path:
    run = ws.root / ZIP_RUN
    run.mkdir(parents=True)
    for name in ZIP_FILES[:2]:
        shutil.copy2(fixtures / ZIP_RUN / name, run / name)
    ws.run("--db", url, "scan")
    return run


def test_api_wait_wakes_on_the_catalog_change_not_on_a_timer(
    workspace: Workspace, keras_checkpoints: Path, catalog_url: str
) -> None:
    run = two_epochs(workspace, keras_checkpoints, catalog_url)
    result: dict[str, Any] = {}

    def waiting() -> None:
        with open_catalog(str(workspace.config), catalog_url) as cat:
            result["armed"] = time.time()
            try:
                # no periodic look within the test: only the change feed can wake it
                result["found"] = cat.wait(ZIP_RUN, newer_than=2, timeout=120, recheck=3600)
            except Exception as exc:  # reported below
                result["error"] = exc
            result["woke"] = time.time()

    thread = threading.Thread(target=waiting, daemon=True)
    thread.start()
    deadline = time.time() + GENEROUS_S
    while "armed" not in result and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well inside its first sleep
    assert thread.is_alive(), result
    shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[2], run / ZIP_FILES[2])
    workspace.run("--db", catalog_url, "scan")
    indexed = time.time()
    thread.join(GENEROUS_S)
    assert not thread.is_alive(), "the wait did not wake on the indexed checkpoint"
    assert "error" not in result, result
    assert result["found"].path == str(run / ZIP_FILES[2]) and result["found"].epoch == 3
    assert result["woke"] - indexed < GENEROUS_S


def test_ckpt_wait_prints_the_new_checkpoint_and_exits_6_at_the_timeout(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    url = f"sqlite:///{workspace.base / 'state' / 'catalog.db'}"
    run = two_epochs(workspace, keras_checkpoints, url)
    cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(workspace.config)]
    waiting = subprocess.Popen(
        [*cmd, "wait", "--run", ZIP_RUN, "--after", str(run / ZIP_FILES[1]), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)
        assert waiting.poll() is None, waiting.communicate()
        shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[2], run / ZIP_FILES[2])
        workspace.run("scan")
        out, err = waiting.communicate(timeout=GENEROUS_S * 3)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    doc = json.loads(out)
    assert doc["path"] == str(run / ZIP_FILES[2]) and doc["status"] == "ok"
    plain = workspace.run("wait", "--run", ZIP_RUN, "--newer-than", "2", "--timeout", "5s")
    assert plain.stdout.strip() == str(run / ZIP_FILES[2])
    started = time.monotonic()
    late = workspace.run("wait", "--run", ZIP_RUN, "--timeout", "1s", check=False)
    assert late.returncode == 6, late.stderr
    assert "no new complete checkpoint" in late.stderr and time.monotonic() - started < 30
    better = workspace.run(
        "wait", "--run", ZIP_RUN, "--newer-than", "0", "--metric", "val_loss",
        "--better-than", "1.65", "--timeout", "2s", check=False,
    )  # fmt: skip
    assert better.returncode == 0 and better.stdout.strip() == str(run / ZIP_FILES[2])
    none_better = workspace.run(
        "wait", "--run", ZIP_RUN, "--newer-than", "0", "--metric", "val_loss",
        "--better-than", "1.0", "--timeout", "1s", check=False,
    )  # fmt: skip
    assert none_better.returncode == 6
    both = workspace.run("wait", "--run", ZIP_RUN, "--newer-than", "1", "--after", "1", check=False)
    assert both.returncode == 2 and "one of them" in both.stderr


@pytest.mark.parametrize("timeout", ["soon", "-1s"])
def test_a_bad_timeout_is_a_usage_error(workspace: Workspace, timeout: str) -> None:
    workspace.run("scan")
    bad = workspace.run("wait", "--run", "x", "--timeout", timeout, check=False)
    assert bad.returncode == 2 and "--timeout" in bad.stderr
