"""Reconcile after downtime: `ckpt serve --once` over 10,000 unchanged, already indexed files.

A root of 10,000 small real Keras files (.h5 / .keras copies, 100 folders), indexed once with
`ckpt scan` (cached in bench/out/service/ with its catalog). Then, as fresh processes,
interleaved: `python -c pass`, `ckpt --config CFG list --limit 1` (start-up + catalog open) and
`ckpt --config CFG serve --once` (reconcile every root, then exit). Nothing may be read again:
the events table must not grow, no indexed_at may change, and the `event=reconciled` log line
must say indexed=0.

    python3 bench/reconcile.py [--quick] [--repeats N] [--profile]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

from _common import (
    CHILD_ENV,
    PYTHON,
    REPO,
    Check,
    Timing,
    interleaved,
    median,
    report,
    run_cmd,
    table,
)
from detection_latency import CKPT, SERVICE, fixtures, write_config

FOLDERS = 100
PROFILE = r"""
import cProfile, pstats, sys
from ckpt_daemon.service.serve import Service
cProfile.run("Service(sys.argv[1], None).run(once=True)", sys.argv[2])
pstats.Stats(sys.argv[2]).sort_stats("cumulative").print_stats(22)
"""


def build(total: int) -> tuple[Path, Path]:
    """The root (made once) and a config whose catalog has every file indexed (made once)."""
    root = SERVICE / f"reconcile-root-{total}"
    if not root.with_name(root.name + ".built").exists():
        shutil.rmtree(root, ignore_errors=True)
        fx = fixtures()
        for i in range(total):
            suffix = "h5" if i % 2 else "keras"
            folder = root / f"run{i % FOLDERS:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            epoch = i // FOLDERS + 1
            shutil.copyfile(fx[suffix], folder / f"model.{epoch:03d}-{1 / (i + 2):.5f}.{suffix}")
        root.with_name(root.name + ".built").touch()
    base = SERVICE / f"reconcile-{total}"
    marker = base / "indexed"
    if not marker.exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        cfg = write_config(base, root, rescan=0)
        print(f"indexing {total} files once with `ckpt scan` ...", flush=True)
        start = time.perf_counter()
        subprocess.run(
            [CKPT, "--config", str(cfg), "scan"],
            stdout=subprocess.DEVNULL,
            env=CHILD_ENV,
            check=True,
        )
        marker.write_text(f"{time.perf_counter() - start:.1f}")
    print(f"(`ckpt scan` of the {total} files took {marker.read_text()} s when first indexed)")
    return root, base / "config.yaml"


def catalog_state(cfg: Path) -> dict[str, object]:
    db = cfg.parent / "state" / "catalog.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {
            "events": conn.execute("SELECT count(*) FROM events").fetchone()[0],
            "ok": conn.execute("SELECT count(*) FROM checkpoints WHERE status='ok'").fetchone()[0],
            "indexed_at": conn.execute("SELECT max(indexed_at) FROM checkpoints").fetchone()[0],
            "metrics_at": conn.execute("SELECT max(metrics_at) FROM checkpoints").fetchone()[0],
        }


def run_once(cfg: Path, log: Path, timing: Timing, lines: list[dict[str, str]]) -> None:
    """`ckpt serve --once` with its stderr kept: wall, CPU, peak RSS, and the reconciled line."""
    start = time.perf_counter()
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [CKPT, "--config", str(cfg), "serve", "--once"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=CHILD_ENV,
            cwd=REPO,
        )
        _pid, status, usage = os.wait4(proc.pid, 0)
    timing.add(time.perf_counter() - start, usage.ru_utime + usage.ru_stime)
    timing.peak_rss.append(usage.ru_maxrss * 1024.0)
    text = log.read_text()
    if os.waitstatus_to_exitcode(status) != 0 or "event=reconciled" not in text:
        raise SystemExit(f"ckpt serve --once failed:\n{text[-3000:]}")
    line = text.split("event=reconciled", 1)[1].splitlines()[0]
    lines.append(dict(pair.split("=", 1) for pair in line.split()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 files, 2 repeats")
    parser.add_argument("--repeats", type=int, help="fresh processes per command (default 5)")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of serve --once")
    args = parser.parse_args()
    total = 1000 if args.quick else 10_000
    repeats = args.repeats or (2 if args.quick else 5)
    _root, cfg = build(total)
    before = catalog_state(cfg)
    lines: list[dict[str, str]] = []
    log = cfg.parent / "serve-once.log"
    jobs = {
        "python -c pass": lambda t: run_cmd([PYTHON, "-c", "pass"], t),
        "ckpt list --limit 1": lambda t: run_cmd(
            [CKPT, "--config", str(cfg), "list", "--limit", "1"], t
        ),
        "ckpt serve --once": lambda t: run_once(cfg, log, t, lines),
    }
    print(f"{total} unchanged checkpoints in {FOLDERS} folders, {repeats} interleaved repeats")
    timings = interleaved(jobs, repeats)
    after = catalog_state(cfg)
    med = {name: median(t.wall) for name, t in timings.items()}
    rows = [
        [
            name,
            med[name],
            median(t.cpu),
            median(t.peak_rss) / 1e6,
            med[name] / med["python -c pass"],
            med[name] / med["ckpt list --limit 1"],
        ]
        for name, t in timings.items()
    ]
    print(f"\nmedians of {repeats} (page cache warm; catalog on local disk, WAL)")
    table(["command", "wall s", "CPU s", "peak RSS MB", "x python", "x list --limit 1"], rows)
    once = med["ckpt serve --once"]
    extra = once - med["ckpt list --limit 1"]
    print(f"\nserve --once minus list --limit 1: {extra:.3f} s = {extra / total * 1e6:.1f} us/file")
    indexed = sorted({int(x["indexed"]) for x in lines})
    unchanged = sorted({int(x["unchanged"]) for x in lines})
    print(
        f"event=reconciled lines: indexed {indexed}, unchanged {unchanged}, missing "
        f"{sorted({x['missing'] for x in lines})}, failed {sorted({x['failed'] for x in lines})}"
    )
    print(f"catalog before: {before}\ncatalog after:  {after}")
    if args.profile:
        stats = cfg.parent / "serve-once.prof"
        subprocess.run([PYTHON, "-c", PROFILE, str(cfg), str(stats)], env=CHILD_ENV, check=True)
    untouched = (
        before["events"] == after["events"]
        and before["indexed_at"] == after["indexed_at"]
        and before["ok"] == after["ok"] == total
    )
    checks = [
        Check("ckpt serve --once wall", once, "< 5", "s", once < 5),
        Check("files re-read (indexed= in log)", float(max(indexed)), "= 0", "", indexed == [0]),
        Check("catalog untouched (events, indexed_at)", float(untouched), "= 1", "", untouched),
    ]
    facts = {"total": total, "repeats": repeats, "rows": rows, "before": before, "after": after}
    return report("reconcile", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
