"""The versions' disk campaign: real Keras training into a small tmpfs under `ckpt serve` with
the shipped config (issue 20, item 2): do our copies ever take the space the trainer needs?

    python3 bench/version_space.py [--quick] [--fs-mb N] [--width W] [--epochs E]

Runs tests/support/version_space.py's driver as root in a private mount namespace (`unshare -m
--propagation private`): a 48 MB tmpfs as the root, a Keras 3 job whose `best.h5`
(save_best_only) and `last.keras` (each epoch) are ~10 MB each (Adam's slots included), in two
halves with `ckpt prune` between (the versions' own policy, as the retention job would), a last
save of a new 10 MB `final.keras`, then rounds of other data filling the filesystem to 4 kB
free. Prints whether the trainer got ENOSPC, the free-space floor reached (statvfs every 5 ms)
and what the trainer had after each epoch, each capture kept or skipped (and why), what the
service gave up of its own and in which order, and `ckpt du`'s versions against the bytes on
disk. `--quick`: the CI-sized run (10 MB tmpfs, ~1 MB files).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, machine, report, table

WORK = OUT / "version_space"
DRIVER = REPO / "tests" / "support" / "version_space.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 MB tmpfs, ~1 MB files")
    parser.add_argument("--fs-mb", type=int, default=None)
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    fs_mb = args.fs_mb or (10 if args.quick else 48)
    width = args.width or (256 if args.quick else 900)
    if os.geteuid() != 0:
        raise SystemExit("needs root: a tmpfs is mounted in a private mount namespace")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    cmd = ["unshare", "-m", "--propagation", "private", PYTHON, str(DRIVER), "--driver", str(WORK)]
    cmd += ["--fs-mb", str(fs_mb), "--width", str(width), "--epochs", str(args.epochs)]
    subprocess.run(cmd, check=True, cwd=REPO, env=CHILD_ENV)
    r = json.loads((WORK / "results.json").read_text())
    print(machine())
    print(f"tmpfs {fs_mb} MB, {args.epochs} epochs, model width {width}")
    job = r["job"]
    enospc = "No space left" in job["output"]
    largest = max(x["size_bytes"] for x in r["list"] if x["version_of"] is None)
    trainer = r.get("trainer") or {"free_after_epoch": [0], "free_before_final": 0}
    print(f"trainer: exit {job['returncode']}, ENOSPC: {'yes' if enospc else 'no'}")
    print(f"biggest checkpoint (the reserve here): {largest / 1e6:.2f} MB")
    print(
        f"free-space floor reached (statvfs every 5 ms, the trainer's own saves included): "
        f"{r['floor_free_bytes'] / 1e6:.2f} MB"
    )
    print(
        "free space the trainer had after each epoch (MB): "
        + ", ".join(f"{n / 1e6:.1f}" for n in trainer["free_after_epoch"])
        + f"; before final.keras: {trainer['free_before_final'] / 1e6:.2f}"
    )
    log = r["serve_log"].splitlines()
    kept = [line for line in log if "event=version_kept" in line]
    skipped = [line for line in log if "event=capture_skipped" in line]
    print(f"captures: {len(kept)} kept, {len(skipped)} skipped")
    for line in skipped[:3]:
        found = re.search(r'path=(\S+) generation=(\d+) reason="([^"]*)"', line)
        if found:
            print(f"  skipped {Path(found[1]).name} v{found[2]}: {found[3]}")
    acts = [e for e in r["log"] if "low free space" in (e["reason"] or "") and e["state"] == "done"]
    steps = Counter(_step(e["reason"]) for e in acts if e["action"] == "purge")
    print(f"our bytes given up (purges): {dict(steps)}")
    rows = [
        [n + 1, x["blob"] / 1e6, x["freed"], x["free"] / 1e6] for n, x in enumerate(r["rounds"])
    ]
    table(["round", "blob MB", "service freed", "free MB after"], rows)
    files = r["files_before_rounds"]
    on_disk = {
        "kept": sum(n for p, n in files.items() if p.startswith(".ckpt-versions/")),
        "trash": sum(
            n for p, n in files.items() if p.startswith(".ckpt-trash/") and "/.ckpt-versions/" in p
        ),
    }
    du = r["du"]["roots"][0]["versions"]
    print(
        f"ckpt du versions: {du['kept_bytes'] / 1e6:.2f} MB kept + {du['trash_bytes'] / 1e6:.2f}"
        f" MB in the trash; on disk: {on_disk['kept'] / 1e6:.2f} + {on_disk['trash'] / 1e6:.2f}"
    )
    in_rounds = {e["id"] for e in _rounds(r)}
    order = [_step(e["reason"]) for e in acts if e["action"] == "purge" and e["id"] in in_rounds]
    checks = [
        Check("trainer saves failed with ENOSPC", float(enospc), "0", "", not enospc),
        Check(
            "least free space the trainer had after an epoch / its biggest checkpoint",
            min(trainer["free_after_epoch"]) / largest,
            ">= 1",
            "x",
            min(trainer["free_after_epoch"]) >= largest and job["returncode"] == 0,
        ),
        Check(
            "self-cleanup in the documented order (rounds)",
            float(order == sorted(order)),
            "1",
            "",
            order == sorted(order),  # empty: nothing of ours was left by then
        ),
        Check(
            "ckpt du versions vs bytes on disk (kept + trash)",
            (du["kept_bytes"] + du["trash_bytes"]) / max(1, on_disk["kept"] + on_disk["trash"]),
            "1",
            "x",
            du["kept_bytes"] == on_disk["kept"] and du["trash_bytes"] == on_disk["trash"],
        ),
    ]
    facts = {
        "fs_mb": fs_mb,
        "width": width,
        "epochs": args.epochs,
        "largest_bytes": largest,
        "floor_free_bytes": r["floor_free_bytes"],
        "trainer": trainer,
        "kept": len(kept),
        "skipped": len(skipped),
        "given_up": dict(steps),
        "du_versions": du,
        "on_disk_versions": on_disk,
    }
    return report("version_space", checks, facts)


def _step(reason: str) -> str:
    if "a version in the trash" in reason:
        return "1 version trash"
    if "an old version" in reason:
        return "2 old version"
    return "3 other trash"


def _rounds(r: dict) -> list[dict]:
    return [e for x in r["rounds"] for e in x["events"]]


if __name__ == "__main__":
    raise SystemExit(main())
