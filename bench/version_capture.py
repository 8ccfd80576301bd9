"""Version capture: keeping one 300 MB generation of a rewritten checkpoint vs `cp` of the file.

What the service does once a generation of `best.keras` is indexed (`usecases.versions.capture`,
minus its catalog row): `fs.fsclone.clone_new` into `<root>/.ckpt-versions/` (a reflink where
the filesystem has them, else `copy_file_range`), fsync, BLAKE3 of the copy against the indexed
hash, then the rename. Against, in the same run and on the same file: `cp` (no fsync, so it
flatters cp) and `cp` + `sync -f` (what a durable copy costs). Page cache warm (the trainer just
wrote the file), interleaved runs, medians. The window a trainer leaves is its next save to the
same name; the service starts the copy about 0.25 s after the trainer closes the file
(detection_latency.py, inotify p50) plus the metadata read (index_cost.py --family keras, ~13 ms).

    python3 bench/version_capture.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import Check, Timing, interleaved, median, report, run_cmd, run_fn, table

from ckpt_daemon.fs.fsclone import clone_new
from ckpt_daemon.fs.hashing import hash_files

FULL_BYTES = 300 << 20
QUICK_BYTES = 32 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB file, 1 repeat")
    parser.add_argument("--repeats", type=int, help="runs of each (default 5)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 5)
    size = QUICK_BYTES if args.quick else FULL_BYTES
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        root = Path(tmp) / "runs"
        (root / "job").mkdir(parents=True)
        source = root / "job" / "best.keras"
        with open(source, "wb") as f:
            for _ in range(size >> 20):
                f.write(os.urandom(1 << 20))
        digest = hash_files([source], root)
        counter = iter(range(1_000_000))
        hows: set[str] = set()

        def capture() -> None:
            target = root / ".ckpt-versions" / "job" / f"best.v{next(counter)}.keras"

            def verify(temp: Path) -> None:
                assert hash_files([temp], root) == digest

            hows.add(clone_new(root, source, target, verify))
            target.unlink()

        copy = str(Path(tmp) / "cp-copy")
        cp, sync = shutil.which("cp") or "cp", shutil.which("sync") or "sync"
        script = f'{cp} "$1" "$2" && {sync} -f "$2"'
        jobs: dict[str, Callable[[Timing], None]] = {
            "capture (clone_new + verify)": partial(run_fn, capture),
            "cp": partial(run_cmd, [cp, str(source), copy]),
            "cp + sync -f": partial(run_cmd, ["sh", "-c", script, "sh", str(source), copy]),
        }
        hash_files([source], root)  # warm the page cache
        timings = interleaved(jobs, repeats)
    medians = {name: median(t.wall) for name, t in timings.items()}
    base = medians["cp"]
    print(f"\n{size / 1e6:.0f} MB generation, copies made by: {', '.join(sorted(hows))}")
    table(
        ["what", "wall s", "MB/s", "vs cp"],
        [[n, m, size / 1e6 / m, f"{m / base:.2f}x"] for n, m in medians.items()],
    )
    ours = medians["capture (clone_new + verify)"]
    durable = medians["cp + sync -f"]
    checks = [
        Check("capture vs cp + sync", ours / durable, "< 2", "x", ours / durable < 2),
    ]
    facts = {"bytes": size, "repeats": repeats, "how": sorted(hows), "seconds": medians}
    return report("version_capture", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
