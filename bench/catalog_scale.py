"""Catalog scale: `ckpt list --json` and `ckpt best` over 100,000 checkpoints in 100 runs.

The fixture (cached in bench/out/catalog/) is an SQLite catalog created at head by
`ckpt_daemon.catalog.store.Store` (Alembic), filled with SQLAlchemy Core bulk inserts (not the
product path): runs, checkpoints and 4 metrics each (loss, val_loss, accuracy, val_accuracy).
Every command runs as a fresh process, interleaved with the baselines, N times; medians. One
baseline is `list --json`'s floor on this machine: a bare process that reads the same rows and
metric values with sqlite3 and writes them with json.dumps (FLOOR). Also checked: `ckpt list`
and `ckpt best` import neither h5py nor TensorFlow; and where `list --json` spends its time.

    python3 bench/catalog_scale.py [--quick] [--repeats N] [--profile]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

from _common import (
    CHILD_ENV,
    OUT,
    PYTHON,
    Check,
    child_json,
    interleaved,
    median,
    report,
    run_cmd,
    table,
)

RUNS, QUICK_RUNS, PER_RUN = 100, 10, 1000
METRICS = ("loss", "val_loss", "accuracy", "val_accuracy")
T0_NS = 1_735_689_600 * 10**9  # 2025-01-01 UTC
NOTE = "resume: unreliable - Keras 3 (<= 3.15) drops the optimizer slots when loading a legacy .h5"

PROBE = r"""
import atexit, json, sys
def _report():
    print(json.dumps({m: m in sys.modules for m in
                      ("h5py", "tensorflow", "keras", "numpy", "alembic", "rich")}))
atexit.register(_report)
sys.argv = ["ckpt", *sys.argv[1:]]
from ckpt_daemon.cli.main import main
main()
"""

# The floor of `list --json` on this machine, measured in the same run: a bare process that
# reads the same rows and metric values with the standard library's sqlite3 (no ckpt_daemon, no
# Checkpoint values, no paths converted, no version counts) and writes each row's dict with
# json.dumps. What `list --json` does beyond this is ours.
FLOOR = r"""
import json, sqlite3, sys
db = sys.argv[1]
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
con.execute("BEGIN")
columns = ("id", "path", "run", "root", "format", "kind", "status", "reason", "size_bytes",
           "mtime_ns", "inode", "hash", "indexed_at", "epoch", "step", "weights_bytes",
           "optimizer_bytes", "optimizer", "n_params", "pinned", "generation", "version_of")
rows = con.execute(
    "SELECT c.id, c.path, r.name, r.root, c.format, c.kind, c.status, c.reason, c.size_bytes, "
    "c.mtime_ns, c.inode, c.hash, c.indexed_at, c.epoch, c.step, c.weights_bytes, "
    "c.optimizer_bytes, c.optimizer, c.n_params, c.pinned, c.generation, c.version_of "
    "FROM checkpoints c JOIN runs r ON r.id = c.run_id ORDER BY c.mtime_ns").fetchall()
metrics = {}
for cid, name, value in con.execute(
        "SELECT checkpoint_id, name, value FROM metrics ORDER BY checkpoint_id, name"):
    metrics.setdefault(cid, {})[name] = value
out = sys.stdout
out.write("[")
sep = "\n"
for row in rows:
    doc = dict(zip(columns, row))
    doc["metrics"] = metrics.get(row[0], {})
    out.write(sep + json.dumps(doc))
    sep = ",\n"
out.write("\n]\n")
"""

PHASES = r"""
import gc, io, json, sys, time
gc.disable()  # as `list --json` runs its rows (cli.output.emit_json_rows, catalog.rows)
t = [time.perf_counter()]
from ckpt_daemon.api import open_catalog
from ckpt_daemon.cli import documents
from ckpt_daemon.cli.output import emit_json_rows
t.append(time.perf_counter())
cat = open_catalog(sys.argv[1])
t.append(time.perf_counter())
rows = cat.list()
t.append(time.perf_counter())
places = cat.locations(rows)
t.append(time.perf_counter())
docs = list(documents.list_rows(rows, places))
t.append(time.perf_counter())
out, sys.stdout = sys.stdout, io.StringIO()
emit_json_rows(iter(docs))
text, sys.stdout = sys.stdout.getvalue(), out
t.append(time.perf_counter())
names = ["import ckpt_daemon.api + cli", "open_catalog (config, schema check)",
         "Catalog.list (SQL, metric values, Checkpoint values, version counts)",
         "Catalog.locations", "documents.list_rows (each row's dict)",
         "emit_json_rows (the C encoder, compact rows)"]
print(json.dumps({"rows": len(rows), "bytes": len(text),
                  "phases": dict(zip(names, [b - a for a, b in zip(t, t[1:])]))}))
"""


def iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))


def fixture_rows(n_runs: int, root: Path) -> tuple[list[dict[str, Any]], ...]:
    rng = random.Random(42)
    runs, ckpts, metrics = [], [], []
    for i in range(1, n_runs + 1):
        runs.append(
            {
                "id": i,
                "root": str(root),
                "name": f"exp{i}",
                "created_at": iso(T0_NS + i * 86_400 * 10**9),
            }
        )
        weights = rng.randrange(2_000_000, 400_000_000, 4)
        floor, speed = rng.uniform(0.05, 0.4), rng.uniform(50, 400)
        for epoch in range(1, PER_RUN + 1):
            cid = (i - 1) * PER_RUN + epoch
            loss = floor + 2.0 * math.exp(-epoch / speed) + abs(rng.gauss(0, 0.01))
            val_loss = loss * 1.08 + 0.02 + abs(rng.gauss(0, 0.02))
            mtime = T0_NS + i * 86_400 * 10**9 + epoch * 600 * 10**9 + rng.randrange(10**9)
            seen = iso(mtime + 5 * 10**9)
            ckpts.append(
                {
                    "id": cid,
                    "run_id": i,
                    "status": "ok",
                    "reason": None,
                    "path": f"{root}/exp{i}/weights.{epoch:03d}-{val_loss:.3f}.h5",
                    "format": "keras-legacy-h5",
                    "kind": "full",
                    "size_bytes": 3 * weights + 60_000,
                    "mtime_ns": mtime,
                    "inode": 5_000_000 + cid,
                    "hash": f"blake3:{rng.getrandbits(256):064x}",
                    "generation": 1,
                    "epoch": epoch,
                    "step": None,
                    "weights_bytes": weights,
                    "optimizer_bytes": 2 * weights + 16,
                    "optimizer": "Adam",
                    "iterations": epoch * 500,
                    "n_params": weights // 4,
                    "n_trainable_params": weights // 4,
                    "model_class": "Sequential",
                    "model_name": f"exp{i}_model",
                    "keras_version": "3.15.1",
                    "backend": "tensorflow",
                    "pinned": epoch % 250 == 0,
                    "details": {"notes": [NOTE], "metric_sources": {"val_loss": "filename"}}
                    if epoch % 10 == 0
                    else None,
                    "first_seen_at": seen,
                    "indexed_at": seen,
                    "metrics_at": seen,
                }
            )
            values = (loss, val_loss, max(0.0, 1 - loss / 2.5), max(0.0, 1 - val_loss / 2.5))
            for name, value in zip(METRICS, values, strict=True):
                source = "filename" if name == "val_loss" else "training.log"
                metrics.append(
                    {"checkpoint_id": cid, "name": name, "value": round(value, 6), "source": source}
                )
    return runs, ckpts, metrics


def make_files(root: Path, ckpts: list[dict[str, Any]]) -> None:
    """A sparse file for every row, of its size and mtime, and the row takes its inode: `best`
    and `latest` stat their answer and skip a file that changed behind the catalog's back."""
    shutil.rmtree(root, ignore_errors=True)
    for row in ckpts:
        path = Path(row["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(row["size_bytes"])
        os.utime(path, ns=(row["mtime_ns"], row["mtime_ns"]))
        row["inode"] = os.stat(path).st_ino


def build_catalog(folder: Path, n_runs: int) -> Path:
    """The cached catalog and its config.yaml; rebuilt when missing or of another size."""
    # v2: rows of real (sparse) files beneath folder/runs-N, their inodes and mtimes; the
    # schema head in the name: a catalog of an older schema is built anew, not refused
    from ckpt_daemon.catalog.db import SCHEMA_HEAD

    db_path = folder / f"catalog-{n_runs}runs-v2-s{SCHEMA_HEAD}.db"
    config = folder / f"config-{n_runs}runs-v2-s{SCHEMA_HEAD}.yaml"
    ok_marker = db_path.with_suffix(".ok")
    if ok_marker.exists() and db_path.exists() and config.exists():
        return config
    from sqlalchemy import insert

    from ckpt_daemon.catalog import db
    from ckpt_daemon.catalog.schema import CHECKPOINTS, METRICS, RUNS
    from ckpt_daemon.catalog.store import Store

    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f"{db_path.name}*"):
        stale.unlink()
    url = f"sqlite:///{db_path}"
    start = time.perf_counter()
    Store(url).close()  # created at head by Alembic
    root = folder / f"runs-{n_runs}"
    runs, ckpts, metrics = fixture_rows(n_runs, root)
    make_files(root, ckpts)
    engine = db.make_engine(url)  # bulk rows straight into the tables: a fixture, not an act
    with engine.begin() as conn:
        for table_, rows in ((RUNS, runs), (CHECKPOINTS, ckpts), (METRICS, metrics)):
            for k in range(0, len(rows), 20_000):
                conn.execute(insert(table_), rows[k : k + 20_000])
    engine.dispose()
    print(
        f"built {db_path.name}: {len(ckpts):,} checkpoints, {len(metrics):,} metrics, "
        f"{db_path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s"
    )
    config.write_text(
        f"# written by bench/catalog_scale.py\ndatabase: sqlite:///{db_path}\n"
        f"state_dir: {folder}/state\nroots:\n  - path: {root}\n"
    )
    ok_marker.touch()
    return config


def profile_list(cfg: str) -> None:
    """Top of cProfile for `list --json` and the slowest imports (-X importtime)."""
    code = (
        "import cProfile, pstats, sys, io; sys.argv = ['ckpt', '--config', sys.argv[1], "
        "'list', '--json']; from ckpt_daemon.cli.main import main; p = cProfile.Profile(); "
        "p.enable()\ntry: main()\nexcept SystemExit: pass\np.disable(); s = io.StringIO(); "
        "pstats.Stats(p, stream=s).sort_stats('cumulative').print_stats(25); "
        "sys.stderr.write(s.getvalue())"
    )
    done = subprocess.run([PYTHON, "-c", code, cfg], capture_output=True, text=True, env=CHILD_ENV)
    print("\ncProfile of `ckpt list --json` (cumulative, top 25):")
    print("\n".join(done.stderr.splitlines()[:40]))
    done = subprocess.run(
        [
            PYTHON,
            "-X",
            "importtime",
            "-c",
            "import ckpt_daemon.cli.main, ckpt_daemon.api, ckpt_daemon.catalog.store;"
            "import ckpt_daemon.core.views",
        ],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    lines = [ln.split("|") for ln in done.stderr.splitlines() if ln.startswith("import time:")]
    rows = sorted(((int(c), n.rstrip()) for _s, c, n in lines[1:]), reverse=True)[:12]
    print("\nslowest imports of the list path, cumulative µs:")
    table(["µs", "module"], [[us, name] for us, name in rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 runs (10k checkpoints), 2 runs")
    parser.add_argument("--repeats", type=int, help="runs per command (default 5)")
    parser.add_argument("--profile", action="store_true", help="cProfile + importtime of list")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    n_runs = QUICK_RUNS if args.quick else RUNS
    cfg = str(build_catalog(OUT / "catalog", n_runs))
    ckpt = str(Path(PYTHON).with_name("ckpt"))
    # What a user types: `ckpt` on PATH may be a pyenv shim (PATH inside pyenv hides it).
    shims = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "shims" / "ckpt"
    shim = str(shims) if shims.exists() else shutil.which("ckpt")
    db_name = Path(cfg).name.replace("config-", "catalog-", 1)
    db = str(Path(cfg).with_name(db_name).with_suffix(".db"))
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "floor: sqlite3 + json.dumps": [PYTHON, "-c", FLOOR, db],
        "python -c 'import sqlalchemy'": [PYTHON, "-c", "import sqlalchemy"],
        "ckpt --help": [ckpt, "--help"],
        "ckpt list --json": [ckpt, "--config", cfg, "list", "--json"],
        "ckpt best --metric val_loss": [ckpt, "--config", cfg, "best", "--metric", "val_loss"],
        "ckpt list --limit 20": [ckpt, "--config", cfg, "list", "--limit", "20"],
    }
    if shim and Path(shim).resolve() != Path(ckpt).resolve():  # e.g. a pyenv shim on PATH
        commands["PATH ckpt best (shim)"] = [shim, "--config", cfg, "best", "--metric", "val_loss"]
        python_on_path = Path(shim).with_name("python3")
        if python_on_path.exists():
            commands["PATH python3 -c pass (shim)"] = [str(python_on_path), "-c", "pass"]
    timings = interleaved({name: partial(run_cmd, cmd) for name, cmd in commands.items()}, repeats)
    med = {name: median(t.wall) for name, t in timings.items()}
    base, base_sa = med["python -c pass"], med["python -c 'import sqlalchemy'"]
    print(
        f"\n{n_runs * PER_RUN:,} checkpoints, {n_runs} runs; wall medians of {repeats} "
        f"interleaved runs; ckpt = {ckpt}"
    )
    table(
        ["command", "wall s", "CPU s", "peak RSS MB", "x python", "x import sqlalchemy"],
        [
            [
                name,
                m,
                median(timings[name].cpu),
                median(timings[name].peak_rss) / 1e6,
                m / base,
                m / base_sa,
            ]
            for name, m in med.items()
        ],
    )

    phases = child_json(PHASES, cfg)
    total = sum(phases["phases"].values())
    print(
        f"\nwhere `list --json` spends its time, in-process ({phases['rows']:,} rows, "
        f"{float(phases['bytes']) / 1e6:.0f} MB of JSON):"
    )
    table(
        ["phase", "s", "share"], [[k, v, f"{v / total:.0%}"] for k, v in phases["phases"].items()]
    )

    loaded = {}
    for label, argv in {
        "list --limit 1": ["list", "--limit", "1"],
        "list --json --limit 1": ["list", "--json", "--limit", "1"],
        "best --metric val_loss": ["best", "--metric", "val_loss"],
    }.items():
        loaded[label] = child_json(PROBE, "--config", cfg, *argv)
    print("\nmodules loaded at exit (True = imported):")
    names = list(next(iter(loaded.values())))
    table(
        ["command", *names],
        [[label, *(found[m] for m in names)] for label, found in loaded.items()],
    )
    heavy = sorted({m for found in loaded.values() for m in ("h5py", "tensorflow") if found[m]})

    list_s, best_s = med["ckpt list --json"], med["ckpt best --metric val_loss"]
    floor_s = med["floor: sqlite3 + json.dumps"]
    checks = [
        Check("ckpt list --json wall", list_s, "< 2", "s", list_s < 2),
        Check("ckpt list --json / floor", list_s / floor_s, "< 1.5", "x", list_s / floor_s < 1.5),
        Check("ckpt best --metric val_loss wall", best_s, "< 0.3", "s", best_s < 0.3),
        Check("list/best import h5py or tensorflow", len(heavy), "== 0", "modules", not heavy),
    ]
    if args.profile or list_s >= 2:
        profile_list(cfg)
    facts = {
        "checkpoints": n_runs * PER_RUN,
        "repeats": repeats,
        "medians": med,
        "ratio_to_python": {k: v / base for k, v in med.items()},
        "ratio_to_import_sqlalchemy": {k: v / base_sa for k, v in med.items()},
        "list_json_to_floor": list_s / floor_s,
        "list_phases": phases,
        "modules": loaded,
    }
    return report("catalog_scale", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
