"""Content hashing throughput: `ckpt_daemon.fs.hashing.hash_files` vs coreutils sha256sum and b2sum.

One ~1 GB file (random bytes, cached in bench/out/), page cache warm (read once first), each
hasher run N times, medians. Ours runs in this process (as the daemon calls it); the coreutils
tools run as subprocesses (their start-up, ~1 ms, is noise against 1 GB).

    python3 bench/hash_throughput.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import blake3
from _common import Check, Timing, interleaved, median, report, run_cmd, run_fn, table

from ckpt_daemon.fs.hashing import hash_files

FULL_BYTES = 1 << 30
QUICK_BYTES = 128 << 20


def make_file(size: int) -> Path:
    path = Path(__file__).resolve().parent / "out" / f"hash_{size >> 20}MiB.bin"
    if path.exists() and path.stat().st_size == size:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing {path.name} ...", flush=True)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        for _ in range(size >> 24):
            f.write(os.urandom(16 << 20))
    os.replace(tmp, path)
    return path


def blake3_one_thread(path: Path) -> str:
    """Reference: the same loop with BLAKE3 on one thread (shows what the threads buy)."""
    hasher = blake3.blake3()
    view = memoryview(bytearray(8 << 20))
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            hasher.update(view[:n])
    return hasher.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB file, 1 repeat")
    parser.add_argument("--repeats", type=int, help="runs per hasher (default 3)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    path = make_file(QUICK_BYTES if args.quick else FULL_BYTES)
    size = path.stat().st_size
    tools = {name: shutil.which(name) for name in ("sha256sum", "b2sum", "b3sum")}
    hash_files([path])  # warm the page cache (and BLAKE3's thread pool)
    ours = "fs.hashing (blake3, threads AUTO)"
    jobs: dict[str, Callable[[Timing], None]] = {
        ours: partial(run_fn, lambda: hash_files([path])),
        "blake3, 1 thread (reference)": partial(run_fn, lambda: blake3_one_thread(path)),
    }
    for name, exe in tools.items():
        if exe:
            label = f"{name} (coreutils)" if name != "b3sum" else name
            jobs[label] = partial(run_cmd, [exe, str(path)])
    timings = interleaved(jobs, repeats)
    medians = {name: median(t.wall) for name, t in timings.items()}
    base = medians[ours]
    print(f"\n{size / 1e6:.0f} MB file, page cache warm, medians of {repeats} interleaved runs")
    table(
        ["hasher", "wall s", "MB/s", "CPU s", "ours faster by"],
        [
            [name, m, size / 1e6 / m, median(timings[name].cpu), f"{m / base:.2f}x"]
            for name, m in medians.items()
        ],
    )
    cores_used = sum(timings[ours].cpu) / sum(timings[ours].wall)
    print(
        f"\nours kept {cores_used:.2f} CPU cores busy on average (os.cpu_count() = "
        f"{os.cpu_count()}; a loaded machine gives it less than its threads ask for)"
    )
    checks = []
    for tool in ("sha256sum", "b2sum"):
        key = f"{tool} (coreutils)"
        if key not in medians:
            print(f"{tool} not installed: no comparison")
            continue
        ratio = medians[key] / base
        checks.append(Check(f"ours vs {tool} speed ratio", ratio, "> 1", "x", ratio > 1))
    facts = {
        "bytes": size,
        "repeats": repeats,
        "cores_used": cores_used,
        "mb_per_s": {n: size / 1e6 / m for n, m in medians.items()},
    }
    return report("hash_throughput", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
