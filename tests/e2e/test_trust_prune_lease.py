"""Issue 20 item 10: a `ckpt prune` stopped mid-run (SIGSTOP) past its lease, whose run another
node's prune took and pruned meanwhile, says once that its lease was lost and which node holds
it, and exits 4, instead of `[Errno 2] No such file or directory` for every file the other
prune moved.

Real processes on one SQLite catalog, two config files (nodes `node-a` and `node-b`), a run of
real Keras 3 checkpoints (copies of a generated fixture).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.support import Workspace

FILES = 200  # enough moves that the prune is caught midway even on an idle machine
TTL = 4  # the shortest lease the config allows
DEADLINE_S = 180


def config(ws: Workspace, node: str) -> Path:
    path = ws.base / f"config-{node}.yaml"
    path.write_text(
        f"state_dir: {ws.base / 'state'}\nroots:\n  - path: {ws.root}\n"
        f"completion:\n  settle_seconds: 0\nservice:\n  node: {node}\n  lease_ttl: {TTL}s\n"
    )
    return path


def ckpt(cfg: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ckpt_daemon", "--config", str(cfg), *args]


def lease_of(db: Path, pid: int) -> bool:
    """Whether process `pid` holds a run's lease now (a read-only look at the catalog)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            rows = conn.execute("SELECT pid FROM leases WHERE pid = ?", (pid,)).fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy: look again
        return False
    return bool(rows)


def test_a_prune_that_lost_its_lease_says_so_once_with_the_holder(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    run = ws.root / "exp1"
    run.mkdir()
    source = keras_checkpoints / "k3/run_zip/e01-vl1.683.keras"
    for i in range(1, FILES + 1):
        shutil.copy2(source, run / f"model-{i:03d}.keras")
    node_a, node_b = config(ws, "node-a"), config(ws, "node-b")
    scan = subprocess.run(ckpt(node_a, "scan"), capture_output=True, text=True, timeout=600)
    assert scan.returncode == 0, scan.stderr
    db = ws.base / "state" / "catalog.db"

    first = subprocess.Popen(
        ckpt(node_a, "prune", "--keep-last", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not lease_of(db, first.pid):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the prune never took the run's lease"
            time.sleep(0.005)
        os.kill(first.pid, signal.SIGSTOP)  # alive, so its lease is free only once expired
        left = len(list(run.glob("*.keras")))
        assert left > 2, f"the prune was not caught midway ({left} files left)"
        while True:  # node-b's prune: refused (exit 4) until node-a's lease has expired
            second = subprocess.run(
                ckpt(node_b, "prune", "--keep-last", "1", "--json"),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if second.returncode != 4:
                break
            assert time.monotonic() < deadline, second.stderr
            time.sleep(0.5)
        assert second.returncode in (0, 3), second.stderr  # 3: node-a's one move in flight
        assert json.loads(second.stdout)["runs"][0]["trashed"] >= left - 2, second.stdout
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=DEADLINE_S)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
            first.wait()
    said = out + err
    assert first.returncode == 4, said
    assert "No such file" not in said and "Errno" not in said, said
    failed = [line for line in err.splitlines() if line.startswith("  failed: ")]
    assert len(failed) == 1 and "its lease was lost: now held by" in failed[0], said
    assert "on node node-b" in said and "exp1" in said, said
    assert "prune: stopped: the lease of exp1 was lost" in err, err
    assert len(list(run.glob("*.keras"))) == 1  # the newest, kept by both
