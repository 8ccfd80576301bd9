"""The trainer's contract, long (issue 39, item 4): random trainers, policies, disks and kills.

    python3 bench/trainer_contract_campaign.py [--seed S] [--runs N] [--quick]
        [--trainers torch hf lightning keras]

Each run is one scenario of `tests/support/trainer_contract.py` drawn from the seed: a real
trainer (a plain PyTorch loop, the Hugging Face Trainer, Lightning, Keras) for 4-10 epochs under
a live `ckpt serve`, with a retention policy or none, on the real filesystem or a tmpfs sized
around what the run needs (with `min_free`; a control run without the service on the same disk
first), killed with SIGKILL after a random save and resumed from `ckpt latest --resumable`, or
not. After every save the harness checks I1-I6 (see the harness). It prints the counts (runs,
saves, kills, checks, violations by invariant), each distinct violation with how many checks saw
it, and saves everything in bench/out/trainer_contract_campaign.json. Target: 0 violations. The
default (40 runs, ~300 saves) takes about 30 minutes on a 2-core machine; `--quick` 4 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict

from _common import OUT, REPO, Check, machine, report, table

sys.path.insert(0, str(REPO))
from tests.support import trainer_contract as tc

WORK = OUT / "trainer_contract"
# A checkpoint's size (MB) at the widths the disk scenarios use, measured on these trainers:
# the tmpfs is sized from it around what the run needs.
WIDE = {"torch": (4096, 0.9), "lightning": (4096, 0.9), "keras": (4096, 0.9), "hf": (128, 1.3)}
SMALL = {"torch": 64, "lightning": 64, "keras": 32, "hf": 16}


def policy(rng: random.Random, trainer: str) -> dict[str, object] | None:
    metric = tc.METRIC[trainer]
    choices: list[dict[str, object] | None] = [
        None,
        {"keep_last": rng.randint(1, 3)},
        {"keep_best": {"metric": metric, "n": 1}},
        {"keep_last": rng.randint(1, 2), "keep_best": {"metric": metric, "n": rng.randint(1, 2)}},
    ]
    return rng.choice(choices)


def draw(rng: random.Random, trainers: list[str]) -> tc.Scenario:
    trainer = rng.choice(trainers)
    epochs = rng.randint(4, 10)
    s = tc.Scenario(trainer=trainer, epochs=epochs, size=SMALL[trainer], seed=rng.randint(0, 999))
    s.policy = policy(rng, trainer)
    if rng.random() < 0.4:
        width, mb = WIDE[trainer]
        s.size = width
        need = mb * (epochs + 3)  # the epoch files, and last/best
        s.fs_mb = max(4, int(need * rng.uniform(0.9, 1.6)) + 2)
        s.min_free = f"{max(2, int(s.fs_mb * rng.uniform(0.1, 0.3)))}MB"  # at least 1 MiB
    if rng.random() < 0.6:
        s.kill_after = rng.randint(1, epochs - 1)
    return s


def normalized(detail: str) -> str:
    """A violation's message with its numbers and versions folded, to count alike ones."""
    return re.sub(r"\d+(\.\d+)?", "N", detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="4 runs")
    parser.add_argument("--trainers", nargs="+", default=list(tc.METRIC), choices=list(tc.METRIC))
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("needs root and unshare(1) (a tmpfs in a private mount namespace)")
        return 2
    runs = 4 if args.quick else args.runs
    rng = random.Random(args.seed)
    shutil.rmtree(WORK, ignore_errors=True)
    totals: Counter[str] = Counter()
    by_invariant: Counter[str] = Counter()
    distinct: Counter[tuple[str, str, str]] = Counter()
    errors, outcomes, rows = [], [], []
    start = time.monotonic()
    for i in range(runs):
        s = draw(rng, args.trainers)
        o = tc.run(s, WORK / f"run{i:03d}")
        outcomes.append(asdict(o))
        if o.error:
            errors.append((i, o.error[-500:]))
        totals.update(runs=1, saves=o.saves, kills=o.kills, checks=o.checks)
        for v in o.violations:
            by_invariant[v["invariant"]] += 1
            distinct[(v["invariant"], s.trainer, normalized(v["detail"]))] += 1
        rows.append(
            [
                i,
                s.trainer,
                s.epochs,
                json.dumps(s.policy),
                s.fs_mb or "-",
                s.min_free or "-",
                s.kill_after or "-",
                o.saves,
                len(o.violations),
                f"{o.seconds:.0f}",
            ]
        )
        print(f"run {i}: {rows[-1]} {dict(o.by_invariant())}", flush=True)
    print()
    table(
        [
            "run",
            "trainer",
            "epochs",
            "policy",
            "fs MB",
            "min_free",
            "kill",
            "saves",
            "violations",
            "s",
        ],
        rows,
    )
    print(
        f"\nseed {args.seed}: {totals['runs']} runs, {totals['saves']} saves, "
        f"{totals['kills']} kills, {totals['checks']} checks, "
        f"{time.monotonic() - start:.0f} s"
    )
    print("violations by invariant:", {i: by_invariant[i] for i in tc.INVARIANTS})
    for (inv, trainer, detail), n in sorted(distinct.items()):
        print(f"  {inv} {trainer:9} x{n}: {detail}")
    for i, error in errors:
        print(f"run {i} did not finish: {error}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "trainer_contract_campaign.json").write_text(
        json.dumps({"seed": args.seed, "totals": totals, "outcomes": outcomes}, indent=1)
    )
    total = sum(by_invariant.values())
    checks = [
        Check("invariant violations", total, "== 0", "checks", total == 0),
        Check("runs that did not finish", len(errors), "== 0", "runs", not errors),
    ]
    facts = {
        "machine": machine(),
        **totals,
        **{f"violations_{k}": by_invariant[k] for k in tc.INVARIANTS},
    }
    return report("trainer_contract_campaign", checks, facts)


if __name__ == "__main__":
    sys.exit(main())
