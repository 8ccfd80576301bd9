"""Checkpoint compression: `ckpt_daemon.transforms.compress` (gzip-4, zstd-3, lzf; all + shuffle)
vs `h5repack -f SHUF -f GZIP=4` on the same ResNet50 + Adam Keras checkpoint (~308 MB).

The checkpoint is made once in bench/out/ by a Keras 3 child: `ResNet50(weights=None)`, Adam,
2 steps on 2 random images, `model.save("x.h5")` (legacy HDF5). Every run is a fresh process
on a fresh copy (page cache warm), interleaved round-robin; ours includes what the daemon does
(read back and compare every dataset, hash the new file, fsync, rename), h5repack only writes.

    python3 bench/compress_bench.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import (
    CHILD_ENV,
    OUT,
    PYTHON,
    Check,
    Timing,
    interleaved,
    median,
    report,
    run_cmd,
    table,
)

MODELS = {"full": "ResNet50", "quick": "MobileNetV2"}  # ~308 MB / ~42 MB with Adam state
GENERATE = """
import sys
import numpy as np
import keras
keras.utils.set_random_seed(0)
model = getattr(keras.applications, sys.argv[2])(weights=None)
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy())
x = np.random.default_rng(0).normal(size=(2, 224, 224, 3)).astype("float32")
model.fit(x, np.array([1, 2]), batch_size=2, epochs=2, verbose=0)
model.save(sys.argv[1])
"""
OURS = """
import sys
from pathlib import Path
from ckpt_daemon.transforms.compress import compress
compress(Path(sys.argv[1]), Path(sys.argv[2]), codec=sys.argv[3], workers=int(sys.argv[4]) or None)
"""
REPACK = ["-f", "SHUF", "-f", "GZIP=4"]


def checkpoint(arch: str) -> Path:
    path = OUT / f"keras_{arch.lower()}_adam.h5"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"writing {path.name} with a Keras child (once) ...", flush=True)
    part = path.with_name(path.stem + ".part.h5")
    subprocess.run([PYTHON, "-c", GENERATE, str(part), arch], check=True, env=CHILD_ENV)
    os.replace(part, path)
    return path


def ours(source: Path, work: Path, codec: str, workers: int, timing: Timing) -> None:
    target = work / f"ours-{codec}-{workers}.h5"
    shutil.copyfile(source, target)  # not timed
    run_cmd([PYTHON, "-c", OURS, str(work), str(target), codec, str(workers)], timing)


def repack(exe: str, source: Path, work: Path, timing: Timing) -> None:
    target = work / "h5repack.h5"
    target.unlink(missing_ok=True)
    run_cmd([exe, *REPACK, str(source), str(target)], timing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="MobileNetV2 (~42 MB), 1 repeat")
    parser.add_argument("--repeats", type=int, help="runs per method (default 3)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    source = checkpoint(MODELS["quick" if args.quick else "full"])
    work = OUT / "compress"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copyfile(source, work / "warm.h5")  # warm the page cache
    exe = shutil.which("h5repack")
    jobs: dict[str, Callable[[Timing], None]] = {
        "ours gzip-4+shuffle": partial(ours, source, work, "gzip", 0),
        "ours gzip-4+shuffle, 1 worker": partial(ours, source, work, "gzip", 1),
        "ours zstd-3+shuffle": partial(ours, source, work, "zstd", 0),
        "ours lzf+shuffle": partial(ours, source, work, "lzf", 0),
    }
    if exe:
        jobs["h5repack -f SHUF -f GZIP=4"] = partial(repack, exe, source, work)
    timings = interleaved(jobs, repeats)
    imported = Timing()  # baseline: a process that only imports what a compress run imports
    run_cmd([PYTHON, "-c", "import hdf5plugin, ckpt_daemon.transforms.compress"], imported)
    outputs = {
        "ours gzip-4+shuffle": work / "ours-gzip-0.h5",
        "ours gzip-4+shuffle, 1 worker": work / "ours-gzip-1.h5",
        "ours zstd-3+shuffle": work / "ours-zstd-0.h5",
        "ours lzf+shuffle": work / "ours-lzf-0.h5",
        "h5repack -f SHUF -f GZIP=4": work / "h5repack.h5",
    }
    size = source.stat().st_size
    ratio = {name: outputs[name].stat().st_size / size for name in timings}
    shutil.rmtree(work)  # ~1.3 GB of outputs; the source checkpoint stays cached
    wall = {name: median(t.wall) for name, t in timings.items()}
    rss = {name: max(t.peak_rss) for name, t in timings.items()}
    base = wall.get("h5repack -f SHUF -f GZIP=4")
    print(f"\n{source.name}: {size / 1e6:.1f} MB, medians of {repeats} interleaved runs")
    rows = []
    for n in timings:
        versus = f"{wall[n] / base:.2f}x" if base else "-"
        rows.append([n, 100 * ratio[n], wall[n], median(timings[n].cpu), rss[n] / 1e6, versus])
    table(["method", "size %", "wall s", "CPU s", "peak RSS MB", "time / h5repack"], rows)
    gzip, zstd = "ours gzip-4+shuffle", "ours zstd-3+shuffle"
    checks = [
        Check(  # bounded memory: slabs in flight, whatever the file size
            "our peak RSS above the import baseline",
            (max(rss[gzip], rss[zstd]) - imported.peak_rss[0]) / 1e6,
            "< 100",
            "MB",
            False,
        ),
    ]
    if base:
        repack_ratio = ratio["h5repack -f SHUF -f GZIP=4"]
        checks += [
            Check(
                "gzip size % minus h5repack's",
                100 * (ratio[gzip] - repack_ratio),
                "<= 0.5",
                "points",
                False,
            ),
            Check("gzip time / h5repack time", wall[gzip] / base, "<= 0.5", "x", False),
            Check("h5repack time / zstd time", base / wall[zstd], ">= 5", "x", False),
        ]
    else:
        print("\nh5repack not found (Debian: apt-get install hdf5-tools): ours only")
    limits = {"< 100": lambda v: v < 100, "<= 0.5": lambda v: v <= 0.5, ">= 5": lambda v: v >= 5}
    for c in checks:
        c.passed = limits[c.target](c.value)
    facts: dict[str, object] = {
        "file": source.name,
        "bytes": size,
        "repeats": repeats,
        "h5repack": exe,
        "import_baseline_rss_bytes": imported.peak_rss[0],
        "methods": {
            n: {"size_ratio": ratio[n], "wall_s": wall[n], "peak_rss_bytes": rss[n]}
            for n in timings
        },
    }
    return report("compress_bench", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
