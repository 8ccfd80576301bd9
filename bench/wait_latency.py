"""`ckpt wait` wake-up latency: from a save's completion to the path printed by the waiter.

A fresh SQLite catalog (and, with `--postgres URL`, that PostgreSQL catalog too). Each round:
a `ckpt wait --run dcp --newer-than N` subprocess is started and given time to arm; the "save"
is a real DCP folder (written once by torch.distributed.checkpoint in a child,
tests/support/async_saves.py) copied in as `step-<N+1>` (into a temp name, then renamed: the
save's completion) and indexed by an in-process scan; the latency is the time from the rename
to the line the waiter prints. Reported both from the rename (what a user sees, it includes
the scan's read of the folder) and from the scan's return (the catalog's commit was before it);
the check is on the latter, the wait's own part (the former adds indexing, measured elsewhere).

    python3 bench/wait_latency.py [--rounds 20] [--postgres URL]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, report, table

sys.path.insert(0, str(REPO))

ARM_S = 1.0  # the waiter's start-up (import, first look) before the save lands


def dcp_folder() -> Path:
    from tests.support.async_saves import generate

    made = OUT / "wait-latency" / "dcp-source"
    if not (made / "dcp" / "step-7" / ".metadata").is_file():
        generate("dcp", made)
    return made / "dcp" / "step-7"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def rounds(database: str, source: Path, count: int) -> tuple[list[float], list[float]]:
    from ckpt_daemon.api import open_catalog

    base = Path(tempfile.mkdtemp(prefix="wait-latency-"))
    root = base / "runs"
    (root / "dcp").mkdir(parents=True)
    config = base / "config.yaml"
    config.write_text(
        f"state_dir: {base / 'state'}\ndatabase: {database}\nroots:\n  - path: {root}\n"
    )
    cmd = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
    subprocess.run([*cmd, "scan"], check=True, capture_output=True, env=CHILD_ENV)
    from_save, from_commit = [], []
    with open_catalog(str(config)) as cat:
        for step in range(1, count + 1):
            waiter = subprocess.Popen(
                [*cmd, "wait", "--run", "dcp", "--newer-than", str(step - 1), "--timeout", "60s"],
                stdout=subprocess.PIPE,
                text=True,
                env=CHILD_ENV,
            )
            time.sleep(ARM_S)
            tmp = root / "dcp" / f".incoming-{step}"
            shutil.copytree(source, tmp)
            final = root / "dcp" / f"step-{step}"
            tmp.rename(final)
            saved = time.monotonic()
            cat.scan([str(final)])
            committed = time.monotonic()
            assert waiter.stdout is not None
            line = waiter.stdout.readline().strip()
            printed = time.monotonic()
            waiter.wait(timeout=30)
            if line != str(final):
                raise SystemExit(f"round {step}: the waiter printed {line!r}, not {final}")
            from_save.append(printed - saved)
            from_commit.append(max(0.0, printed - committed))
    shutil.rmtree(base, ignore_errors=True)
    return from_save, from_commit


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--postgres", help="a PostgreSQL catalog URL at head to measure too")
    args = parser.parse_args()
    source = dcp_folder()
    backends = {"sqlite": "sqlite:///{state_dir}/catalog.db"}
    if args.postgres:
        backends["postgresql"] = args.postgres
    rows, checks = [], []
    for name, url in backends.items():
        from_save, from_commit = rounds(url, source, args.rounds)
        rows.append([name, args.rounds, f"{p95(from_save):.3f}", f"{max(from_save):.3f}",
                     f"{p95(from_commit):.3f}"])  # fmt: skip
        # The wait's own part: from the catalog's commit (the scan's return comes after it) to
        # the printed path. The time from the save includes indexing (the reader child, the
        # run's derivation), which is the indexer's cost, not the wait's: shown, not checked.
        value = p95(from_commit)
        checks.append(Check(f"wait wake-up p95 ({name})", value, "< 1", "s", value < 1.0))
    table(["catalog", "rounds", "p95 from save (s)", "max (s)", "p95 from scan return (s)"], rows)
    return report("wait_latency", checks, {"rounds": args.rounds, "arm_s": ARM_S})


if __name__ == "__main__":
    sys.exit(main())
