"""The pipeline under SIGKILL: `ckpt serve` with a stage on every checkpoint, killed at random
moments again and again, then left to finish. Every job must end with exactly one recorded
result (`done`, its metric in the catalog), and no job may ever run twice at once.

The stage is a probe script: at its start it records its pid under the job's checkpoint in a
lock file, and notes an OVERLAP if the pid already there is a live process (a second copy of
the same job while the first still runs); it then sleeps a random moment, records its end and
prints its result line. A killed daemon's child dies with it (PR_SET_PDEATHSIG), and its job is
free at once for the next daemon of this host (its holder is gone).

    python3 bench/pipeline_kills.py [--kills 40] [--checkpoints 12] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from random import Random

from _common import PYTHON, Launcher

PROBE = r"""
import json, os, random, sys, time
ckpt, log = sys.argv[1], sys.argv[2]
lock = f"{log}.{ckpt}.lock"
try:
    holder = int(open(lock).read())
    state = open(f"/proc/{holder}/stat").read().rsplit(")", 1)[1].split()[0]
    if state not in ("Z", "X"):  # a killed probe not reaped yet is no overlap
        open(log, "a").write(f"OVERLAP {ckpt} {holder} {os.getpid()}\n")
except (FileNotFoundError, ValueError, ProcessLookupError):
    pass
open(lock, "w").write(str(os.getpid()))
open(log, "a").write(f"start {ckpt} {os.getpid()}\n")
time.sleep(random.uniform(0.5, 4.0))
open(log, "a").write(f"end {ckpt} {os.getpid()}\n")
os.remove(lock)
print(json.dumps({"metrics": {"runs": 1}}))
"""


def write_checkpoints(run: Path, count: int) -> None:
    """`count` real torch files (a child with torch: the bench process never imports it)."""
    run.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, torch\n"
        "for i in range(int(sys.argv[2])):\n"
        "    torch.save({'epoch': i, 'model': {'w': torch.full((4,), float(i))}},"
        " f'{sys.argv[1]}/ckpt_epoch{i:03d}.pt')\n"
    )
    subprocess.run([PYTHON, "-c", code, str(run), str(count)], check=True)


def configure(base: Path, probe: Path, log: Path) -> Path:
    config = base / "config.yaml"
    command = [PYTHON, str(probe), "{id}", str(log)]
    config.write_text(
        f"state_dir: {base / 'state'}\n"
        f"roots:\n  - path: {base / 'runs'}\n"
        "completion:\n  settle_seconds: 0.2\n  min_age_seconds: 0.1\n"
        "service:\n  heartbeat: 1s\n  lease_ttl: 4s\nschedule:\n  rescan: 0\n"
        "pipeline:\n"
        f"  - name: probe\n    command: {json.dumps(command)}\n    concurrency: 2\n"
        "    timeout: 1m\n"
    )
    return config


def jobs(launcher: Launcher, config: Path, base: Path) -> list[dict]:
    done = launcher.run(
        ["--config", str(config), "jobs", "--json"], env=dict(os.environ), cwd=base, timeout=60
    )
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []


def _starts(log: Path) -> int:
    return log.read_text().count("start ") if log.exists() else 0


def _wait_for_a_start(log: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _starts(log) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def run_campaign(
    base: Path, *, kills: int, checkpoints: int, seed: int, launcher: Launcher | None = None
) -> dict:
    launcher = launcher or Launcher()
    rng = Random(seed)
    probe, log = base / "probe.py", base / "probe.log"
    probe.write_text(PROBE)
    write_checkpoints(base / "runs" / "exp", checkpoints)
    config = configure(base, probe, log)
    args = ["--config", str(config), "serve"]
    killed = 0
    started = time.monotonic()
    with open(base / "serve.log", "ab") as serve_log:
        while killed < kills:
            daemon = launcher.start(args, env=dict(os.environ), cwd=base, stderr=serve_log.fileno())
            # Killed while a stage runs: once the next probe has started, a random moment later
            # (before, during or after its sleep); or at a random moment of its start-up.
            if rng.random() < 0.8:
                _wait_for_a_start(log, _starts(log) + 1, timeout=60)
                time.sleep(rng.uniform(0.0, 1.5))
            else:
                time.sleep(rng.uniform(0.1, 1.5))
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGKILL)
                killed += 1
            daemon.wait(timeout=60)
        daemon = launcher.start(args, env=dict(os.environ), cwd=base, stderr=serve_log.fileno())
        deadline = time.monotonic() + 300
        found: list[dict] = []
        while time.monotonic() < deadline:
            found = jobs(launcher, config, base)
            if len(found) == checkpoints and all(j["state"] == "done" for j in found):
                break
            time.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    lines = log.read_text().splitlines() if log.exists() else []
    ends: dict[str, int] = {}
    for line in lines:
        if line.startswith("end "):
            ends[line.split()[1]] = ends.get(line.split()[1], 0) + 1
    starts = {line.split()[2] for line in lines if line.startswith("start ")}
    finished = {line.split()[2] for line in lines if line.startswith("end ")}
    return {
        "kills": killed,
        "stages_killed_mid_run": len(starts - finished),
        "checkpoints": checkpoints,
        "jobs": len(found),
        "done": sum(1 for j in found if j["state"] == "done"),
        "results": sum(1 for j in found if j["result"] and j["result"]["metrics"]),
        "attempts": sum(j["attempts"] for j in found),
        "overlaps": sum(1 for line in lines if line.startswith("OVERLAP")),
        "never_ran_to_end": sum(1 for j in found if str(j["checkpoint_id"]) not in ends),
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--checkpoints", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-pipeline-kills-") as tmp:
        counts = run_campaign(
            Path(tmp), kills=opts.kills, checkpoints=opts.checkpoints, seed=opts.seed
        )
    for key, value in counts.items():
        print(f"{key:>18}  {value}")
    ok = (
        counts["jobs"] == counts["done"] == counts["results"] == opts.checkpoints
        and counts["overlaps"] == 0
        and counts["never_ran_to_end"] == 0
    )
    print("PASS" if ok else "MISS", "every job one result, none run twice at once")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
