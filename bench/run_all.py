"""Run every benchmark (each in its own interpreter) and print one summary of the targets.

python3 bench/run_all.py [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from _common import BENCH, OUT, PYTHON, machine, table

BENCHES = (
    "index_cost",  # --family keras and torch (orbax: its own run, ~10 GB)
    "hash_throughput",
    "catalog_scale",
    "cli_latency",
    "detection_latency",
    "detection_during_artifacts",
    "crash_trash",
    "daemon_footprint",
    "reconcile",
    "retention",
    "naming_inference",
    "run_derivation",
    "version_capture",
    "disk_pressure",
    "version_space",
    "split_bench",
    "hf_split_bench",
    "sharded_consolidate_bench",
    "deepspeed_bench",
    "describe_bench",
    "compress_bench",
    "crash_campaign",
    "version_crash",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (see each script)")
    parser.add_argument("--only", nargs="+", choices=BENCHES, help="run only these")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    rows: list[list[object]] = []
    failed = []
    for name in args.only or BENCHES:
        result = OUT / f"result-{name}.json"
        result.unlink(missing_ok=True)
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        done = subprocess.run(
            [PYTHON, str(BENCH / f"{name}.py"), *(["--quick"] if args.quick else [])]
        )
        seconds = time.perf_counter() - start
        if not result.exists():
            failed.append(name)
            rows.append([name, "(crashed)", "", "", f"exit {done.returncode}"])
            continue
        for check in json.loads(result.read_text())["checks"]:
            rows.append(
                [
                    name,
                    check["name"],
                    f"{check['value']:.4g} {check['unit']}",
                    check["target"],
                    "PASS" if check["passed"] else "MISS",
                ]
            )
            if not check["passed"]:
                failed.append(f"{name}: {check['name']}")
        print(f"({name} took {seconds:.0f} s)")
    print(f"\n=== summary ({'quick' if args.quick else 'full'}) ===")
    print(f"machine: {machine()}")
    table(["bench", "check", "value", "target", "verdict"], rows)
    if failed:
        print(f"\n{len(failed)} missed: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
