"""CLI latency: how long `ckpt best`, `ckpt list --json` and `ckpt status` take, start to exit.

The catalog is real: a few hundred copies of one small Keras `.h5` (made once, as
detection_latency.py makes it) in RUNS run folders, named by a filename template that carries
the epoch and a val_loss, indexed by a real `ckpt scan`. Each command runs as a fresh process
through the installed `ckpt` console script, interleaved with `python -c pass` (round-robin, so a
load spike hits all alike), REPEATS times; medians and p90s, and ratios against `python -c pass`
of the same run. Warm: the package's bytecode is compiled first, as `pip install` does (an
editable install under PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module on every
run), and one untimed run fills the page cache. `--importtime` also prints what `ckpt best`
imports beyond `python -c pass`, slowest first (from `python -X importtime`).

    python3 bench/cli_latency.py [--quick] [--repeats N] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
from functools import partial
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, Check, Timing, interleaved, report, run_cmd, table
from detection_latency import fixtures

BASE = OUT / "cli_latency"
CKPT = str(Path(PYTHON).with_name("ckpt"))  # the console script, as users run it
RUNS, EPOCHS = 20, 15
TARGET_BEST_S = 0.25  # `ckpt best` on this project's machine kind (issue 9)
HEAVY = ("sqlalchemy", "alembic", "rich", "h5py", "numpy", "tensorflow")
PROBE = r"""
import atexit, json, sys
heavy = set(sys.argv[1].split(","))
atexit.register(lambda: sys.stderr.write("LOADED " + json.dumps(sorted(
    {m.split(".")[0] for m in sys.modules} & heavy)) + "\n"))
sys.argv = ["ckpt", *sys.argv[2:]]
from ckpt_daemon.cli.main import main
main()
"""


def catalog(n_runs: int, n_epochs: int) -> Path:
    """BASE/config.yaml naming a root of n_runs x n_epochs real checkpoints, scanned (cached)."""
    base = BASE / f"{n_runs}x{n_epochs}"
    config = base / "config.yaml"
    db = base / "state" / "catalog.db"
    if db.exists() and _rows(db) == n_runs * n_epochs:
        return config
    shutil.rmtree(base, ignore_errors=True)
    root = base / "runs"
    source = fixtures()["h5"]
    for r in range(1, n_runs + 1):
        (root / f"exp{r:02d}").mkdir(parents=True)
        for e in range(1, n_epochs + 1):
            val_loss = 2.0 / e + (r * 7 + e * 13) % 10 / 100
            shutil.copyfile(source, root / f"exp{r:02d}" / f"weights.{e:02d}-{val_loss:.2f}.hdf5")
    config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {root}\n    filename_template:\n"
        '      - "weights.{epoch:02d}-{val_loss:.2f}.hdf5"\ncompletion:\n  settle_seconds: 0\n'
    )
    print(f"indexing {n_runs * n_epochs} checkpoints with `ckpt scan` ...", flush=True)
    subprocess.run([CKPT, "--config", str(config), "scan"], check=True, env=CHILD_ENV)
    if _rows(db) != n_runs * n_epochs:
        raise SystemExit(f"the scan indexed {_rows(db)} checkpoints, not {n_runs * n_epochs}")
    return config


def _rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM checkpoints WHERE status='ok'").fetchone()[0])


def compile_package() -> None:
    """Bytecode for every module of the installed package (read even when writing is off)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("ckpt_daemon")
    assert spec is not None and spec.submodule_search_locations
    for folder in spec.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def loaded(config: Path, *args: str) -> list[str]:
    """Which HEAVY libraries `ckpt ARGS` has imported when it exits."""
    done = subprocess.run(
        [PYTHON, "-c", PROBE, ",".join(HEAVY), "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("LOADED ")]
    if done.returncode != 0 or not line:
        raise SystemExit(f"ckpt {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    names: list[str] = json.loads(line[-1][len("LOADED ") :])
    return names


def importtime(config: Path) -> None:
    """What `ckpt best` imports beyond `python -c pass`, by self time, slowest first."""

    def profile(cmd: list[str]) -> dict[str, tuple[int, int]]:
        done = subprocess.run(
            [PYTHON, "-X", "importtime", *cmd], capture_output=True, text=True, env=CHILD_ENV
        )
        found = {}
        for line in done.stderr.splitlines():
            if line.startswith("import time:") and "self [us]" not in line:
                self_us, cumulative_us, name = line[len("import time:") :].split("|")
                found[name.strip()] = (int(self_us), int(cumulative_us))
        return found

    baseline = profile(["-c", "pass"])
    best = profile(["-m", "ckpt_daemon", "--config", str(config), "best", "--metric", "val_loss"])
    extra = {name: t for name, t in best.items() if name not in baseline}
    by_package: dict[str, int] = {}
    for name, (self_us, _cumulative) in extra.items():
        by_package[name.split(".")[0]] = by_package.get(name.split(".")[0], 0) + self_us
    print(f"\n`ckpt best` imports {len(extra)} modules beyond `python -c pass`:")
    table(
        ["package", "self ms"],
        [[p, us / 1000] for p, us in sorted(by_package.items(), key=lambda x: -x[1])[:12]],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    repeats = args.repeats or (5 if args.quick else 40)
    config = catalog(RUNS, EPOCHS)
    ckpt = [CKPT, "--config", str(config)]
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "ckpt best --metric val_loss": [*ckpt, "best", "--metric", "val_loss"],
        "ckpt list --json": [*ckpt, "list", "--json"],
        "ckpt status": [*ckpt, "status"],
    }
    jobs = {name: partial(run_cmd, cmd) for name, cmd in commands.items()}
    compile_package()
    run_cmd(commands["ckpt best --metric val_loss"], Timing())  # warm the page cache
    timings = interleaved(jobs, repeats)
    base = sorted(timings["python -c pass"].wall)[len(timings["python -c pass"].wall) // 2]
    rows = []
    for name, timing in timings.items():
        mid = sorted(timing.wall)[len(timing.wall) // 2]
        rows.append([name, mid, p90(timing.wall), mid / base, p90(timing.wall) / base])
    print(f"\n{RUNS * EPOCHS} checkpoints in {RUNS} runs; {repeats} interleaved repeats each")
    table(["command", "median s", "p90 s", "median / pass", "p90 / pass"], rows)
    heavy = {name: loaded(config, *cmd[3:]) for name, cmd in commands.items() if name != rows[0][0]}
    for name, libraries in heavy.items():
        print(f"{name} imports: {', '.join(libraries) or 'none of ' + ', '.join(HEAVY)}")
    if args.importtime:
        importtime(config)
    best = timings["ckpt best --metric val_loss"].wall
    best_median = sorted(best)[len(best) // 2]
    checks = [
        Check(
            "ckpt best median", best_median, f"< {TARGET_BEST_S}", "s", best_median < TARGET_BEST_S
        ),
        Check(
            "heavy libraries imported by best, list --json, status",
            float(sum(len(v) for v in heavy.values())),
            "== 0",
            "",
            not any(heavy.values()),
        ),
    ]
    facts = {"rows": RUNS * EPOCHS, "repeats": repeats, "table": rows, "heavy": heavy}
    return report("cli_latency", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
