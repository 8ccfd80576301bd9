"""The catalog alone on a full small filesystem, under `ckpt serve` (issue 40 item 7).

`python catalog_disk_full.py --driver OUT FIXTURES` must run in a private mount namespace
(`unshare -m --propagation private`, as root): it mounts a tmpfs of FS_MB over OUT/state (the
catalog's folder; the root, OUT/runs, stays on the ordinary disk), makes the catalog with one
real Keras checkpoint of FIXTURES' k3/run_zip, fills the tmpfs to its last byte, saves a second
checkpoint, and starts `ckpt serve`; then, each step waiting on its condition in the service's
log: space returned, the daemon indexes what came meanwhile; the disk filled again while it
runs, a third checkpoint saved; space returned again. OUT/results.json holds what was seen at
each step (the daemon alive, `ckpt status --json`, `/metrics`' `ckpt_catalog_disk_full`), the
final `ckpt list --json`, the exit status of the SIGTERM and the service's log. Every command
is a fresh interpreter: the tests' zygote lives outside this namespace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

FS_MB = 2
RUN = "k3/run_zip"
FILES = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]
DEADLINE_S = 60


def ckpt(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def fill(folder: Path) -> None:
    """Write zeros into `folder/filler` until the filesystem has no byte left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 1):  # big blocks, then the last partial ones
            try:
                while os.write(fd, bytes(size)) == size:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def driver(out: Path, fixtures: Path) -> None:
    state, run = out / "state", out / "runs" / "job"
    state.mkdir(parents=True)
    run.mkdir(parents=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(state)]
    subprocess.run(mount, check=True)
    config = out / "config.yaml"
    config.write_text(
        f"state_dir: {state}\nroots:\n  - path: {out / 'runs'}\n"
        "completion: {settle_seconds: 0, min_age_seconds: 0}\n"
        "service:\n  heartbeat: 1s\n  metrics_listen: 127.0.0.1:0\n"
    )
    saved = [run / name for name in FILES]
    results: dict[str, Any] = {}
    shutil.copy2(fixtures / RUN / FILES[0], saved[0])
    made = ckpt(config, "scan")
    assert made.returncode == 0, made.stderr
    fill(state)
    shutil.copy2(fixtures / RUN / FILES[1], saved[1])  # saved while the catalog is full
    log_path = out / "serve.log"
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "ckpt_daemon", "--config", str(config), "serve"],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        seen = lambda text: text in log_path.read_text()  # noqa: E731
        wait(lambda: seen("event=catalog_disk_full"), "full start", daemon)
        status = ckpt(config, "status", "--json")
        results["at_start"] = {
            "alive": daemon.poll() is None,
            "status_exit": status.returncode,
            "status": json.loads(status.stdout) if status.returncode == 0 else status.stderr,
        }
        (state / "filler").unlink()  # space returns
        wait(lambda: seen("event=ready"), "ready", daemon)
        wait(lambda: seen(f"event=indexed path={saved[1]}"), "the file saved meanwhile", daemon)
        port = int(re.search(r"metrics_listening address=127\.0\.0\.1:(\d+)", log_text(out))[1])
        results["after_start"] = {"metric": disk_full_metric(port)}

        fill(state)  # full again while it runs
        shutil.copy2(fixtures / RUN / FILES[2], saved[2])
        again = lambda: log_text(out).count("event=catalog_disk_full") >= 2  # noqa: E731
        wait(again, "full while running", daemon)
        status = ckpt(config, "status", "--json")
        results["while_running"] = {
            "alive": daemon.poll() is None,
            "metric": disk_full_metric(port),
            "status_exit": status.returncode,
            "status": json.loads(status.stdout) if status.returncode == 0 else status.stderr,
        }
        (state / "filler").unlink()
        wait(lambda: seen(f"event=indexed path={saved[2]}"), "the file saved while full", daemon)
        wait(lambda: log_text(out).count("event=catalog_space_back") >= 2, "space back", daemon)
        results["after_running"] = {"metric": disk_full_metric(port)}
        listed = ckpt(config, "list", "--json")
        results["list"] = json.loads(listed.stdout) if listed.returncode == 0 else listed.stderr
    except Exception as exc:  # the results say what went wrong, with the log
        results["error"] = repr(exc)
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        try:
            results["exit"] = daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            results["exit"] = daemon.wait()
        results["saved"] = [str(p) for p in saved]
        results["log"] = log_text(out)
        (out / "results.json").write_text(json.dumps(results, indent=1))


def log_text(out: Path) -> str:
    return (out / "serve.log").read_text()


def disk_full_metric(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = re.search(r"^ckpt_catalog_disk_full (\S+)$", text, re.M)
    return float(found[1]) if found else None


def wait(condition: Any, what: str, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if daemon.poll() is not None:
            raise RuntimeError(f"ckpt serve exited {daemon.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {DEADLINE_S}s for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    if sys.argv[1] != "--driver":
        raise SystemExit("usage: catalog_disk_full.py --driver OUT FIXTURES")
    os.environ.pop("CKPT_CONFIG", None)
    driver(Path(sys.argv[2]), Path(sys.argv[3]))
