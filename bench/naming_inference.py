"""Naming-scheme inference: `ckpt_daemon.core.naming.infer_naming` over one run of 10,000
checkpoint names with 10,000 logged epochs, over 100 runs of 100, and over 10,000 names that share
no skeleton (every one read by its labels alone), each followed by `fields(name)` for every name.

Measured in-process (medians, interleaved) against a baseline in the same run: parsing the same
names with one compiled template regex (`FilenameTemplate.match`), which reading names at all
costs. The issue's target: < 1 s for 10,000.

    python3 bench/naming_inference.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from functools import partial

from _common import Check, interleaved, median, report, run_fn, table

from ckpt_daemon.core.naming import infer_naming
from ckpt_daemon.core.training_metrics import compile_template

TEMPLATE = "model-{epoch:05d}-{val_loss:.4f}-{val_accuracy:.4f}.keras"


def logs(n: int) -> dict[int, dict[str, float]]:
    out = {}
    for e in range(1, n + 1):
        val_loss = 0.3 + 0.5 * math.exp(-e / (n / 5)) + 0.01 * math.sin(e)
        out[e] = {"loss": val_loss * 0.9, "val_loss": val_loss, "accuracy": 1 - val_loss * 0.8}
        out[e]["val_accuracy"] = 1 - val_loss
    return out


def run_names(n: int, logged: dict[int, dict[str, float]]) -> list[str]:
    names = [TEMPLATE.format(epoch=e, **logged[e]) for e in range(1, n + 1)]
    return [*names, "best.keras", "last.keras", "model-final.keras"]  # odd files, as in life


def infer_and_read(names: list[str], logged: dict[int, dict[str, float]]) -> int:
    naming = infer_naming(names, logged)
    return sum(len(naming.fields(n).metrics) for n in names)


def baseline(names: list[str]) -> int:
    template = compile_template(TEMPLATE)
    return sum(template.match(n) is not None for n in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 names; 10 runs of 100")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = 1000 if args.quick else 10_000
    n_runs = 10 if args.quick else 100
    logged = logs(n)
    one = run_names(n, logged)
    small_logs = logs(100)
    many = [run_names(100, small_logs) for _ in range(n_runs)]
    hostile = [f"exp{i}_{chr(97 + i % 26)}-e{i % 50}-loss{i / 7:.3f}.h5" for i in range(n)]

    naming = infer_naming(one, logged)
    assert [s.template for s in naming.schemes] == [TEMPLATE], naming.as_json()
    assert infer_and_read(one, logged) == 2 * n, "every name's two metrics read back"

    jobs: dict[str, Callable[[], object]] = {
        f"infer + fields, 1 run x {n:,}": lambda: infer_and_read(one, logged),
        f"infer + fields, {n_runs} runs x 100": lambda: [
            infer_and_read(r, small_logs) for r in many
        ],
        f"infer + fields, {n:,} lone names": lambda: infer_and_read(hostile, {}),
        f"infer only, 1 run x {n:,}": lambda: infer_naming(one, logged),
        f"baseline: one regex, {n:,} names": lambda: baseline(one),
    }
    timings = interleaved({k: partial(run_fn, fn) for k, fn in jobs.items()}, args.repeats)
    med = {k: median(t.wall) for k, t in timings.items()}
    base = med[f"baseline: one regex, {n:,} names"]
    print(f"\nnaming inference; medians of {args.repeats}")
    table(["what", "s", "x regex"], [[k, v, v / base] for k, v in med.items()])
    print("\nscheme:", naming.as_json()[0])
    one_run = med[f"infer + fields, 1 run x {n:,}"]
    checks = [
        Check(f"infer + fields, one run of {n:,}", one_run, "< 1", "s", one_run < 1.0),
        Check(
            f"infer + fields, {n:,} lone names",
            med[f"infer + fields, {n:,} lone names"],
            "< 1",
            "s",
            med[f"infer + fields, {n:,} lone names"] < 1.0,
        ),
    ]
    return report("naming_inference", checks, {"medians_s": med, "ratio_to_regex": one_run / base})


if __name__ == "__main__":
    raise SystemExit(main())
