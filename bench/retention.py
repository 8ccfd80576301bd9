"""Retention: planning one run of 10,000 checkpoints with every rule on, and `ckpt prune
--dry-run` over the 100 runs x 1,000 checkpoints catalog of catalog_scale.py.

Planning is measured in-process (median of N) against a baseline in the same run: sorting the
same items by time, which any planner must at least do. The dry run is a fresh `ckpt` process
(it reads the catalog only, never the files), against `python -c pass` and `ckpt list --limit 1`.

    python3 bench/retention.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import math
import shutil
from functools import partial
from pathlib import Path

from _common import OUT, PYTHON, Check, interleaved, median, report, run_cmd, run_fn, table
from catalog_scale import QUICK_RUNS, RUNS, build_catalog

from ckpt_daemon.core.retention import Item, KeepBest, Policy, plan

POLICY = Policy(
    keep_last=5,
    keep_best=(KeepBest("val_loss", 3), KeepBest("val_accuracy", 2)),
    keep_every=10,
    keep_within=2 * 86400.0,
    keep_hourly=24,
    keep_daily=7,
    keep_weekly=4,
    max_bytes=50 * 10**9,
)
POLICY_YAML = """retention:
  keep_last: 5
  keep_best: [{metric: val_loss, n: 3}, {metric: val_accuracy, n: 2}]
  keep_every: 10
  keep_within: 2d
  keep_hourly: 24
  keep_daily: 7
  keep_weekly: 4
  max_bytes: 50GB
"""


def items(n: int) -> list[Item]:
    base = 1_735_689_600.0
    out = []
    for i in range(n):
        val_loss = 0.3 + 0.5 * math.exp(-i / (n / 5)) + 0.01 * math.sin(i)
        out.append(
            Item(
                id=i + 1,
                path=f"/data/run/w.{i:05d}.h5",
                status="ok",
                mtime=base + i * 900.0,
                size_bytes=300_000_000,
                epoch=i + 1,
                pinned=i % 997 == 0,
                metrics={"val_loss": val_loss, "val_accuracy": 1 - val_loss},
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 items; a 10-run catalog")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    run = items(1000 if args.quick else 10_000)
    timings = interleaved(
        {
            "plan (all rules)": partial(run_fn, lambda: plan(run, POLICY)),
            "baseline: sort by mtime": partial(run_fn, lambda: sorted(run, key=lambda i: i.mtime)),
        },
        args.repeats,
    )
    decided = plan(run, POLICY)
    kept = sum(d.action == "keep" for d in decided.decisions)
    planning = median(timings["plan (all rules)"].wall)
    sort = median(timings["baseline: sort by mtime"].wall)
    print(
        f"\none run of {len(run):,} checkpoints: {kept} kept, "
        f"{len(decided.decisions) - kept} trashed; medians of {args.repeats}"
    )
    table(
        ["what", "s", "x sort"],
        [["plan (all rules)", planning, planning / sort], ["sort by mtime", sort, 1.0]],
    )

    n_runs = QUICK_RUNS if args.quick else RUNS
    config = build_catalog(OUT / "catalog", n_runs)
    with_policy = config.with_name(f"config-{n_runs}runs-retention.yaml")
    with_policy.write_text(config.read_text() + POLICY_YAML)
    ckpt = shutil.which("ckpt", path=str(Path(PYTHON).parent)) or "ckpt"
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "ckpt list --limit 1": [ckpt, "--config", str(with_policy), "list", "--limit", "1"],
        "ckpt prune --dry-run --json": [
            ckpt,
            "--config",
            str(with_policy),
            "prune",
            "--dry-run",
            "--json",
        ],
    }
    runs = interleaved({k: partial(run_cmd, v) for k, v in commands.items()}, args.repeats)
    med = {k: median(t.wall) for k, t in runs.items()}
    print(
        f"\n`ckpt prune --dry-run` over {n_runs} runs x 1,000 checkpoints; medians of "
        f"{args.repeats}"
    )
    table(
        ["command", "wall s", "x python"],
        [[k, v, v / med["python -c pass"]] for k, v in med.items()],
    )
    checks = [Check("plan 10,000 checkpoints, all rules", planning, "< 0.5", "s", planning < 0.5)]
    return report("retention", checks, {"plan_s": planning, "sort_s": sort, "commands": med})


if __name__ == "__main__":
    raise SystemExit(main())
