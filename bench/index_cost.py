"""Indexing cost must not grow with checkpoint size.

Two real Keras 3 full-model legacy HDF5 files with Adam state, same topology, ~10 MB and ~1 GB
(cached in bench/out/). Each measurement runs `daemon.formats.detect.read_checkpoint` once in a
fresh interpreter: wall time of the call, peak RSS above the RSS right after the import, and the
bytes the process read (/proc/self/io rchar) during the call. Hashing is bench/hash_throughput.py.

    python3 bench/index_cost.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any

from _common import CHILD_ENV, OUT, PYTHON, Check, child_json, median, report, table

# Input -> Dense(h) -> Dense(h) -> Dense(out): 4 layers, 6 weights, Adam m+v per weight.
SMALL = (128, 768, 128)  # ~0.79 M params -> ~9.5 MB with Adam state
BIG = (1024, 8192, 1024)  # ~84 M params -> ~1.0 GB with Adam state
QUICK_BIG = (1024, 2048, 1024)  # ~8.4 M params -> ~100 MB

MAKE_MODEL = r"""
import json, os, resource, sys
import numpy as np
import keras
d_in, hidden, d_out = (int(a) for a in sys.argv[2:5])
model = keras.Sequential([
    keras.Input((d_in,)),
    keras.layers.Dense(hidden, activation="relu", name="hidden1"),
    keras.layers.Dense(hidden, activation="relu", name="hidden2"),
    keras.layers.Dense(d_out, name="out"),
], name="bench_mlp")
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
rng = np.random.default_rng(0)
x = rng.random((4, d_in), dtype=np.float32)
y = rng.random((4, d_out), dtype=np.float32)
model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # one step: Adam m/v exist, iterations=1
tmp = sys.argv[1] + ".part.h5"
model.save(tmp)
os.replace(tmp, sys.argv[1])
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

MEASURE = r"""
import json, os, resource, sys, time
from pathlib import Path
from typing import Any

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar")).split()[1])

import ckpt_daemon.formats.detect as detect
base_rss = rss()
read0 = rchar()
start = time.perf_counter()
info = detect.read_checkpoint(Path(sys.argv[1]))
seconds = time.perf_counter() - start
read_bytes = rchar() - read0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
heavy = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
assert not heavy, f"read_checkpoint imported {heavy}"
opt = info.optimizer
assert opt is not None and opt.n_variables > 0, "no optimizer state in the file"
print(json.dumps({"seconds": seconds, "rss_increase": peak - base_rss, "base_rss": base_rss,
                  "read_bytes": read_bytes, "format": str(info.format), "n_params": info.n_params,
                  "optimizer_bytes": opt.state_bytes, "optimizer_vars": opt.n_variables}))
"""


def make_checkpoint(shape: tuple[int, int, int]) -> Path:
    path = OUT / f"keras_mlp_{shape[0]}x{shape[1]}x{shape[2]}.h5"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.name} (Keras 3 child, one fit step, model.save) ...", flush=True)
    env = {**CHILD_ENV, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(
        [PYTHON, "-c", MAKE_MODEL, str(path), *map(str, shape)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"generating {path} failed:\n{done.stderr[-3000:]}")
    print(f"  done: {path.stat().st_size / 1e6:.1f} MB, generator child {done.stdout.strip()}")
    return path


def warm(path: Path) -> None:
    """Both files are measured with a warm page cache (the daemon reads files just written)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the measured numbers; the file facts (same in every run) from the first."""
    out: dict[str, Any] = dict(runs[0])
    for key in ("seconds", "rss_increase", "base_rss", "read_bytes"):
        out[key] = median([float(r[key]) for r in runs])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB instead of ~1 GB, 2 repeats")
    parser.add_argument("--repeats", type=int, help="fresh children per file (default 5)")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    big_shape = QUICK_BIG if args.quick else BIG
    files = {"small": make_checkpoint(SMALL), "big": make_checkpoint(big_shape)}
    for path in files.values():
        warm(path)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in files}
    for _ in range(repeats):  # interleaved, so that load spikes hit both files alike
        for label, path in files.items():
            runs[label].append(child_json(MEASURE, str(path)))
    results = {label: summarize(found) for label, found in runs.items()}
    mb = 1e6
    rows = [
        [
            label,
            os.path.getsize(p) / mb,
            r["n_params"],
            float(r["optimizer_bytes"]) / mb,
            r["optimizer_vars"],
            float(r["seconds"]) * 1000,
            float(r["read_bytes"]) / 1024,
            float(r["base_rss"]) / mb,
            float(r["rss_increase"]) / mb,
        ]
        for (label, p), r in zip(files.items(), results.values(), strict=True)
    ]
    print(
        f"\nread_checkpoint, medians of {repeats} fresh interpreters (format "
        f"{results['big']['format']}, page cache warm)"
    )
    table(
        [
            "file",
            "MB",
            "params",
            "Adam MB",
            "opt vars",
            "ms",
            "KiB read",
            "RSS@import MB",
            "RSS incr MB",
        ],
        rows,
    )
    small, big = results["small"], results["big"]
    size_ratio = files["big"].stat().st_size / files["small"].stat().st_size
    time_ratio = float(big["seconds"]) / float(small["seconds"])
    rss_delta = (float(big["rss_increase"]) - float(small["rss_increase"])) / mb
    read_ratio = float(big["read_bytes"]) / float(small["read_bytes"])
    print(f"\nsize ratio big/small        {size_ratio:8.1f}x")
    print(f"time ratio big/small        {time_ratio:8.2f}x")
    print(f"bytes-read ratio big/small  {read_ratio:8.2f}x")
    print(f"RSS increase big - small    {rss_delta:8.2f} MB")
    print("tensorflow/keras imported by read_checkpoint: no (asserted in every child)")
    checks = [
        Check("read_checkpoint time big/small", time_ratio, "< 2", "x", time_ratio < 2),
        Check("RSS increase big vs small", rss_delta, "< 50", "MB", rss_delta < 50),
    ]
    facts = {"size_ratio": size_ratio, "read_ratio": read_ratio, "repeats": repeats, "rows": rows}
    return report("index_cost", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
