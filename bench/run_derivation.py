"""Run derivation: `usecases.derivation.refresh_run` over one run of 10,000 checkpoints.

The fixture: a real SQLite catalog (created at head by `Store`, rows written by the product's
`Store.record`), one run of 10,000 `model-{epoch:05d}-{val_loss:.4f}.keras` checkpoints plus
`best.keras` and `last.keras` with optimizer iteration counts only, and a CSVLogger
`training.log` of 10,000 epochs in the run folder. No checkpoint file exists on disk: derivation
never opens one (only the sidecars `<checkpoint>.json`, absent here, and the logs).

Measured in-process, interleaved, medians, against baselines in the same run: reading the run's
rows from the catalog (`Store.run_members`, which any derivation must do) and reading its logs
(`read_run_logs`). Reported: the first derivation (every row written, one transaction) and an
unchanged re-derivation (what `ckpt scan --reindex` costs per run when nothing changed).

    python3 bench/run_derivation.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import math
import shutil
import time
from functools import partial
from pathlib import Path

from _common import OUT, Check, interleaved, median, report, run_fn, table

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.model import (
    CheckpointInfo,
    CheckpointStatus,
    FileStat,
    Format,
    IndexRecord,
    Kind,
    OptimizerInfo,
)
from ckpt_daemon.formats.run_logs import read_run_logs
from ckpt_daemon.settings.config import RootConfig
from ckpt_daemon.usecases.derivation import RunRef, refresh_run

SPE = 26


def val_loss(e: int, n: int) -> float:
    return 0.3 + 0.5 * math.exp(-e / (n / 5)) + 0.01 * math.sin(e)


def build(folder: Path, n: int) -> tuple[Store, RunRef]:
    shutil.rmtree(folder, ignore_errors=True)
    root = folder / "runs"
    run_dir = root / "big"
    run_dir.mkdir(parents=True)
    lines = ["epoch,loss,val_loss"] + [
        f"{e - 1},{val_loss(e, n) * 0.9!r},{val_loss(e, n)!r}" for e in range(1, n + 1)
    ]
    (run_dir / "training.log").write_text("\n".join(lines) + "\n")
    store = Store(f"sqlite:///{folder / 'catalog.db'}")
    names = [(f"model-{e:05d}-{val_loss(e, n):.4f}.keras", e) for e in range(1, n + 1)]
    names += [("best.keras", n // 3), ("last.keras", n)]
    at = "2026-12-01T00:00:00Z"
    for i, (name, epoch) in enumerate(names):
        info = CheckpointInfo(
            Format.KERAS_ZIP, Kind.FULL, optimizer=OptimizerInfo("Adam", iterations=epoch * SPE)
        )
        store.index.record(
            IndexRecord(
                path=str(run_dir / name),
                root=str(root),
                run="big",
                status=CheckpointStatus.OK,
                reason=None,
                # written at its epoch's end: fixed names too (derive checks the pace)
                stat=FileStat(1000, epoch * 1000 + (i >= n), i + 1),
                hash=f"h{i}",
                info=info,
            ),
            actor_name="bench",
            at=at,
        )
    config = RootConfig(
        path=root,
        observer="inotify",
        poll_interval=30.0,
        filename_templates=(),
        metrics_files=("training.log",),
        retention=None,
    )
    return store, RunRef(config, run_dir, "big")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 checkpoints")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = 1000 if args.quick else 10_000
    started = time.perf_counter()
    store, run = build(OUT / "derivation", n)
    print(f"fixture: {n + 2:,} rows recorded in {time.perf_counter() - started:.1f} s")

    start = time.perf_counter()
    changed = refresh_run(
        store.runs, store.versions, run, [], other_runs=(), at="2026-12-01T00:00:01Z"
    )
    first = time.perf_counter() - start
    assert changed == n + 2, changed
    rows = {r.path.rsplit("/", 1)[1]: r for r in store.runs.run_members(str(run.root.path), "big")}
    assert rows["best.keras"].epoch == n // 3 and rows["last.keras"].epoch == n, "iterations"
    assert rows["model-00007-" + f"{val_loss(7, n):.4f}.keras"].epoch == 7

    jobs = {
        f"re-derive, unchanged, {n + 2:,} rows": lambda: refresh_run(
            store.runs, store.versions, run, [], other_runs=(), at="2026-12-01T00:00:02Z"
        ),
        "baseline: the run's rows (run_members)": lambda: store.runs.run_members(
            str(run.root.path), "big"
        ),
        f"baseline: its logs ({n:,} epochs)": lambda: read_run_logs(
            run.folder, run.root.path, run.root.metrics_files
        ),
    }
    timings = interleaved({k: partial(run_fn, fn) for k, fn in jobs.items()}, args.repeats)
    med = {k: median(t.wall) for k, t in timings.items()}
    base = med["baseline: the run's rows (run_members)"]
    print(f"\nrun derivation; first derivation (all rows written) {first:.2f} s")
    print(f"medians of {args.repeats}")
    table(["what", "s", "x rows read"], [[k, v, v / base] for k, v in med.items()])
    again = med[f"re-derive, unchanged, {n + 2:,} rows"]
    checks = [
        Check(f"re-derive one run of {n + 2:,}, nothing changed", again, "< 3", "s", again < 3),
        Check(f"first derivation of {n + 2:,} rows", first, "< 10", "s", first < 10),
    ]
    store.close()
    return report(
        "run_derivation", checks, {"first_s": first, "medians_s": med, "ratio": again / base}
    )


if __name__ == "__main__":
    raise SystemExit(main())
