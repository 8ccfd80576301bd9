"""The disk guard freeing checkpoints a pipeline stage still waits on, on a real small filesystem
(issue 43: the guard says which pending evaluations it gave up).

`python guard_gave_up.py --driver OUT HF_RUNS` must run in a private mount namespace (`unshare
-m --propagation private`, as root): it mounts a tmpfs of FS_MB over OUT/root, copies two real
Hugging Face Trainer runs into it (the session's `hf_runs`: `a` from trainer/out, `b` from
trainer-sharded/out, their mtimes set so that a's older checkpoint is the oldest of all), starts
`ckpt serve` (catalog outside the tmpfs) whose `eval` stage runs on run `a` only and only on
hosts labelled `gpu` (this one is not: its jobs stay pending), waits for the jobs, then writes a
filler that leaves MIN_FREE minus DEFICIT free. The guard must free two checkpoints: b's older
one (no stage waits on it) first, then a's older one, giving up its `eval`. OUT/results.json
holds the jobs, `ckpt status --json`, `ckpt status`, `ckpt log --json`, the web view's /disk page
and the service's log.
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
from typing import Any

FS_MB = 4
MIN_FREE = 1 << 20  # the smallest min_free there is (1 MiB)
DEFICIT = 150 * 1024  # more than one of these checkpoints frees, less than two
DEADLINE_S = 90


def ckpt(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def driver(out: Path, hf_runs: Path) -> None:
    root, state = out / "root", out / "state"
    root.mkdir(parents=True)
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(root)], check=True)
    base = time.time() - 3600
    placed = [
        ("trainer", "checkpoint-4", "a", 0),  # the oldest of all: a stage waits on it
        ("trainer-sharded", "checkpoint-2", "b", 10),
        ("trainer", "checkpoint-6", "a", 20),
        ("trainer-sharded", "checkpoint-4", "b", 30),
    ]
    for source, name, run, age in placed:
        target = root / run / name
        shutil.copytree(hf_runs / source / "out" / name, target)
        for path in [target, *target.iterdir()]:
            os.utime(path, (base + age, base + age))
    config = out / "config.yaml"
    config.write_text(
        f"state_dir: {state}\nroots:\n  - path: {root}\n    min_free: {MIN_FREE}\n"
        "completion: {settle_seconds: 0, min_age_seconds: 0}\n"
        "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
        "pipeline:\n  - {name: eval, runs: a, runs_on: [gpu], command: [/bin/true]}\n"
    )
    log_path = out / "serve.log"
    results: dict[str, Any] = {"placed": placed}
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "ckpt_daemon", "--config", str(config), "serve"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait(lambda: b"event=ready" in log_path.read_bytes(), "the service ready", daemon)

            def jobs_made() -> bool:  # read in the catalog: a CLI per poll costs a second
                try:
                    with sqlite3.connect(f"file:{state / 'catalog.db'}?mode=ro", uri=True) as db:
                        sql = "SELECT count(*) FROM stage_jobs WHERE state = 'pending'"
                        return bool(db.execute(sql).fetchone()[0] == 2)
                except sqlite3.Error:  # not made yet
                    return False

            wait(jobs_made, "eval pending on both of a's checkpoints", daemon)
            with open(root / "filler", "wb") as filler:
                filler.write(bytes(free_bytes(root) - MIN_FREE + DEFICIT))
            results["free_after_fill"] = free_bytes(root)
            seen = lambda: b"event=disk_guard_gave_up" in log_path.read_bytes()  # noqa: E731
            wait(seen, "the guard giving up a's eval", daemon)
            wait(lambda: free_bytes(root) >= MIN_FREE, "free space back above min_free", daemon)
            results["jobs"] = json.loads(ckpt(config, "jobs", "--json").stdout)
            results["log"] = json.loads(ckpt(config, "log", "--json").stdout)
            # By now (two commands later) a heartbeat has the guard's state after its pass.
            results["status"] = json.loads(ckpt(config, "status", "--json").stdout)
            results["status_text"] = ckpt(config, "status").stdout
            results["disk_page"] = disk_page(config)
            results["free_at_end"] = free_bytes(root)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                results["exit"] = daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                results["exit"] = daemon.wait()
    results["serve_log"] = log_path.read_text()
    (out / "results.json").write_text(json.dumps(results, indent=1))


def disk_page(config: Path) -> str:
    """The web view's /disk page, answered by the same `WebApp` the server runs."""
    from ckpt_daemon.api import open_catalog
    from ckpt_daemon.web.app import WebApp

    app = WebApp(lambda: open_catalog(str(config)), cache_seconds=0)
    try:
        return app.respond("/disk", {}).body.decode()
    finally:
        app.close()


def wait(condition: Any, what: str, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if daemon.poll() is not None:
            raise RuntimeError(f"ckpt serve exited {daemon.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {DEADLINE_S}s for {what}")
        time.sleep(0.2)


if __name__ == "__main__":
    if sys.argv[1] != "--driver":
        raise SystemExit("usage: guard_gave_up.py --driver OUT HF_RUNS")
    os.environ.pop("CKPT_CONFIG", None)
    driver(Path(sys.argv[2]), Path(sys.argv[3]))
