"""Indexing a 100-step Orbax run must cost the same whatever the steps' byte size.

Two runs written by orbax.checkpoint's own `CheckpointManager` (in a jax child), 100 steps each,
same tree (`params.w`, `params.b`, `opt_state.mu`), one at about 1 MB per step, one at about
100 MB per step (random float32: nothing compresses it away). Each measurement reads every step
the way the indexer's reader child does (`formats.folder_readers.read`, then the folder-save
verdict of `usecases.save_checks`: who writes in it, how old it is) in a fresh interpreter:
wall time for the 100 steps, and the bytes the process read (/proc/self/io rchar). Checked:
the big run's wall and bytes read are less than twice the small run's.

`ckpt scan` of each run is timed too and shown, not checked: it also hashes every file (BLAKE3,
bench/hash_throughput.py), which is linear in bytes by design.

The runs are written into bench/out/orbax-index/ (about 10 GB for the big one) and removed at
the end unless --keep; --big-mb makes the big one smaller on a tight disk.

    python3 bench/orbax_index_cost.py [--steps 100] [--big-mb 100] [--repeats 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from _common import CHILD_ENV, OUT, PYTHON, Check, child_json, median, report, table

MAKE = r"""
import sys
import numpy as np
import jax.numpy as jnp
import orbax.checkpoint as ocp
out, steps, mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
n = max(1, int(mb * 2**20 / 4 / 2))  # float32: half in params.w, half in opt_state.mu
rng = np.random.default_rng(0)
w = jnp.asarray(rng.random(n, dtype=np.float32))
state = {"params": {"w": w, "b": jnp.zeros((16,), jnp.float32)}, "opt_state": {"mu": w * 0.5}}
options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=False)
with ocp.CheckpointManager(out, options=options) as manager:
    for step in range(1, steps + 1):
        manager.save(step, args=ocp.args.StandardSave(state))
    manager.wait_until_finished()
"""

MEASURE = r"""
import json, os, sys, time
from pathlib import Path

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar")).split()[1])

from ckpt_daemon.formats import folder_readers
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import save_checks

run = Path(sys.argv[1])
steps = sorted((p for p in run.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
config = config_module.load(sys.argv[2])  # the scan's config: the completion defaults
read0 = rchar()
start = time.perf_counter()
tensors = 0
for step in steps:
    info = folder_readers.read(step, run)
    assert save_checks.read_whole(step, info, config, time.time_ns()) is None, step
    tensors += sum(len(layer.weights) for layer in info.layers)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "read_bytes": rchar() - read0, "steps": len(steps),
                  "tensors": tensors, "modules": sorted(m for m in ("jax", "orbax", "torch",
                  "tensorstore") if m in sys.modules)}))
"""


def make(run: Path, steps: int, mb: float) -> None:
    if (run / "done").is_file():
        return
    shutil.rmtree(run, ignore_errors=True)
    run.parent.mkdir(parents=True, exist_ok=True)
    env = {**CHILD_ENV, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    subprocess.run([PYTHON, "-c", MAKE, str(run), str(steps), str(mb)], check=True, env=env)
    (run / "done").write_text("")


def disk_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file())


def config_for(run: Path) -> Path:
    """A config whose one root is the run, its catalog in a fresh folder beside it."""
    base = run.parent / f"{run.name}-catalog"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    config = base / "config.yaml"
    config.write_text(f"state_dir: {base / 'state'}\nroots:\n  - path: {run}\n")
    return config


def scan_seconds(run: Path) -> float:
    """`ckpt scan` of the run into a fresh SQLite catalog (reader child, hashing, derivation)."""
    config = config_for(run)
    start = time.perf_counter()
    subprocess.run(
        [PYTHON, "-m", "ckpt_daemon", "--config", str(config), "scan"],
        check=True,
        capture_output=True,
        env=CHILD_ENV,
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(config.parent, ignore_errors=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--small-mb", type=float, default=1.0)
    parser.add_argument("--big-mb", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the runs in bench/out")
    args = parser.parse_args()
    folder = OUT / "orbax-index"
    runs = {
        "small": folder / f"small-{args.steps}x{args.small_mb:g}MB",
        "big": folder / f"big-{args.steps}x{args.big_mb:g}MB",
    }
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, mb in (("small", args.small_mb), ("big", args.big_mb)):
            started = time.perf_counter()
            make(runs[name], args.steps, mb)
            print(f"{name}: written in {time.perf_counter() - started:.0f}s", flush=True)
        for name, run in runs.items():
            reads = []
            for _ in range(args.repeats):  # interleaving would not help: each is one child
                reads.append(child_json(MEASURE, str(run), str(config_for(run))))
            results[name] = {
                "bytes": disk_bytes(run),
                "seconds": median([r["seconds"] for r in reads]),
                "read_bytes": median([r["read_bytes"] for r in reads]),
                "steps": reads[0]["steps"],
                "tensors": reads[0]["tensors"],
                "modules": reads[0]["modules"],
                "scan_seconds": scan_seconds(run),
            }
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    small, big = results["small"], results["big"]
    rows = [
        [
            name,
            r["steps"],
            f"{r['bytes'] / 2**20:.0f} MiB",
            f"{r['seconds']:.3f}",
            f"{r['read_bytes'] / 2**10:.0f} KiB",
            f"{r['scan_seconds']:.1f}",
            ",".join(r["modules"]) or "none",
        ]
        for name, r in results.items()
    ]
    table(
        ["run", "steps", "on disk", "read all (s)", "bytes read", "ckpt scan (s)", "imports"],
        rows,
    )
    time_ratio = big["seconds"] / small["seconds"]
    read_ratio = big["read_bytes"] / max(1, small["read_bytes"])
    checks = [
        Check("metadata read time, big / small", time_ratio, "< 2", "x", time_ratio < 2),
        Check("bytes read, big / small", read_ratio, "< 2", "x", read_ratio < 2),
        Check("steps read", big["steps"], f"== {args.steps}", "", big["steps"] == args.steps),
        Check("framework imports", len(big["modules"]), "== 0", "", not big["modules"]),
    ]
    return report("orbax_index_cost", checks, {"results": results, "cpus": os.cpu_count()})


if __name__ == "__main__":
    raise SystemExit(main())
