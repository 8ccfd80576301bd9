"""Detection latency of `ckpt serve`: writer's close() to the row visible with status ok.

A fresh root, `ckpt serve` as a subprocess (events only: schedule.rescan 0). The bench writes
200 copies of small real Keras files (.h5 / .keras, made once in a Keras child) into 20 run
folders, 100 ms apart, each like Keras does: open the final name, write in chunks, close. It
reads the SQLite catalog directly (read-only URI) every 20 ms to see when each row turns ok.
Once with observer inotify, once with polling (poll_interval 1 s). Also home of the fixtures and
the `ckpt serve` helpers that daemon_footprint.py and reconcile.py share.

    python3 bench/detection_latency.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, median, report, table

SERVICE = OUT / "service"
FIXTURES = SERVICE / "fixtures"
CKPT = str(Path(PYTHON).with_name("ckpt"))  # the console script beside the interpreter
TF_PREFIX = FIXTURES / "tf" / "ckpt-1"

MAKE_FIXTURES = r"""
import sys
import numpy as np
import keras
import tensorflow as tf
out = sys.argv[1]
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(4)], name="tiny")
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
rng = np.random.default_rng(0)
model.fit(rng.random((4, 8)), rng.random((4, 4)), batch_size=4, epochs=1, verbose=0)
model.save(f"{out}/tiny.h5")
model.save(f"{out}/tiny.keras")
ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
print(tf.train.CheckpointManager(ckpt, f"{out}/tf", max_to_keep=1).save())
"""


def fixtures() -> dict[str, Path]:
    """Small real checkpoints, made once: Keras 3 .h5 and .keras, a TF CheckpointManager save."""
    found = {"h5": FIXTURES / "tiny.h5", "keras": FIXTURES / "tiny.keras", "tf": TF_PREFIX}
    if not all(p.exists() for p in (found["h5"], found["keras"], *tf_files(TF_PREFIX))):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        print("generating small fixtures (Keras 3 + TensorFlow child) ...", flush=True)
        env = {**CHILD_ENV, "KERAS_BACKEND": "tensorflow"}
        done = subprocess.run(
            [PYTHON, "-c", MAKE_FIXTURES, str(FIXTURES)], env=env, capture_output=True, text=True
        )
        if done.returncode != 0 or not tf_files(TF_PREFIX):
            raise SystemExit(f"generating fixtures failed:\n{done.stderr[-3000:]}")
    return found


def tf_files(prefix: Path) -> list[Path]:
    """The index and data shards of a TF checkpoint prefix (empty if there is no index)."""
    index = prefix.with_name(prefix.name + ".index")
    return [index, *sorted(prefix.parent.glob(prefix.name + ".data-*"))] if index.exists() else []


def write_config(base: Path, root: Path, **keys: object) -> Path:
    """base/config.yaml with state_dir base/state; keys override the reference defaults."""
    v = {"observer": "auto", "poll_interval": 30, "settle": 5, "min_age": 0.2, "rescan": 600}
    v |= {"heartbeat": 10} | keys
    text = (
        f"state_dir: {base / 'state'}\nroots:\n  - path: {root}\n"
        f"    observer: {v['observer']}\n    poll_interval: {v['poll_interval']}\n"
        f"completion:\n  settle_seconds: {v['settle']}\n  min_age_seconds: {v['min_age']}\n"
        f"schedule:\n  rescan: {v['rescan']}\nservice:\n  heartbeat: {v['heartbeat']}\n"
    )
    (base / "config.yaml").write_text(text)
    return base / "config.yaml"


def start_serve(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    """`ckpt --config CFG serve` (its own process: the console script), stderr to `log`."""
    with log.open("wb") as err:
        return subprocess.Popen(
            [CKPT, "--config", str(cfg), "serve"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=CHILD_ENV,
            cwd=REPO,
        )


def wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> None:
    """Until the daemon logged event=ready (it has reconciled every root)."""
    deadline = time.monotonic() + timeout
    while "event=ready" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_serve(proc)
            raise SystemExit(f"ckpt serve did not get ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def stop_serve(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    return sorted(values)[max(0, math.ceil(q / 100 * len(values)) - 1)]


def write_like_keras(data: bytes, path: Path) -> tuple[float, float]:
    """Open the final name, write in 4 chunks, close; (monotonic, wall) time of the close."""
    with path.open("wb") as f:
        step = -(-len(data) // 4)
        for i in range(0, len(data), step):
            f.write(data[i : i + step])
            f.flush()
    return time.monotonic(), time.time()


@dataclass
class Round:
    observer: str
    written: int = 0
    latency: list[float] = field(default_factory=list)  # close -> seen by the poller
    stamped: list[float] = field(default_factory=list)  # close -> the row's indexed_at
    polls: list[float] = field(default_factory=list)
    notes: str = ""
    complete: bool = False


def measure(observer: str, files: int, runs: int, interval: float) -> Round:
    base = SERVICE / f"latency-{observer}"
    shutil.rmtree(base, ignore_errors=True)
    root = base / "root"
    for r in range(runs):  # the run folders exist before their first checkpoint
        (root / f"run{r:02d}").mkdir(parents=True)
    keys = {"settle": 2, "min_age": 0.2, "rescan": 0, "heartbeat": 1}
    cfg = write_config(base, root, observer=observer, poll_interval=interval, **keys)
    proc = start_serve(cfg, base / "serve.log")
    wait_ready(proc, base / "serve.log")
    blobs = {s: p.read_bytes() for s, p in fixtures().items() if s != "tf"}
    conn = sqlite3.connect(f"file:{base / 'state' / 'catalog.db'}?mode=ro", uri=True)
    query = "SELECT path, indexed_at FROM checkpoints WHERE status='ok'"
    closed: dict[str, tuple[float, float]] = {}
    seen: dict[str, tuple[float, str]] = {}
    out = Round(observer)
    cpu0, t0 = os.times(), time.monotonic()
    next_write = next_poll = t0 + 1.0
    deadline = math.inf
    while len(seen) < files and time.monotonic() < deadline:
        now = time.monotonic()
        if out.written < files and now >= next_write:
            n, suffix = out.written, ("h5" if out.written % 2 else "keras")
            path = root / f"run{n % runs:02d}" / f"model.{n // runs + 1:02d}-{1 / (n + 2):.3f}"
            closed[f"{path}.{suffix}"] = write_like_keras(blobs[suffix], Path(f"{path}.{suffix}"))
            out.written, next_write = n + 1, next_write + 0.1
            deadline = now + 30 if out.written == files else deadline
            continue
        if now >= next_poll:
            rows = conn.execute(query).fetchall()
            after = time.monotonic()
            out.polls.append(after - now)
            for text, at in rows:
                if text not in seen and text in closed:
                    seen[text] = (after, at)
            next_poll = now + 0.02
        wake = min(next_poll, next_write) if out.written < files else next_poll
        time.sleep(max(0.0, wake - time.monotonic()))
    cpu = os.times()
    bench_cpu = (cpu.user + cpu.system - cpu0.user - cpu0.system) / (time.monotonic() - t0)
    conn.close()
    cmd = [CKPT, "--config", str(cfg), "list", "--json"]
    listed = json.loads(subprocess.run(cmd, capture_output=True, env=CHILD_ENV, check=True).stdout)
    listed_ok = {r["path"] for r in listed if r["status"] == "ok"}
    exit_code = stop_serve(proc)
    log = (base / "serve.log").read_text()
    for text, (seen_at, at) in seen.items():
        out.latency.append(seen_at - closed[text][0])
        wall = dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
        out.stamped.append(wall - closed[text][1])
    out.complete = len(seen) == out.written == files and listed_ok == set(closed) and not exit_code
    out.notes = (
        f"seen {len(seen)}/{out.written}; `ckpt list --json`: {len(listed_ok)} ok rows, "
        f"same paths: {listed_ok == set(closed)}; {len(out.polls)} polls, median "
        f"{median(out.polls) * 1000:.2f} ms; bench CPU {bench_cpu:.1%}; daemon log: "
        f"{log.count('event=incomplete')} incomplete, "
        f"{log.count('level=warning') + log.count('level=error')} warning/error; exit {exit_code}"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 files over 4 folders")
    parser.add_argument("--repeats", type=int, help="rounds per observer, pooled (default 1)")
    args = parser.parse_args()
    files, runs = (40, 4) if args.quick else (200, 20)
    interval, settle = 1.0, 2.0
    rounds: dict[str, list[Round]] = {"inotify": [], "polling": []}
    for _ in range(args.repeats or 1):  # interleaved rounds
        for observer, done in rounds.items():
            print(f"{observer}: {files} files in {runs} folders, 100 ms apart ...", flush=True)
            done.append(measure(observer, files, runs, interval))
            print(f"  {done[-1].notes}", flush=True)
    rows, stats = [], {}
    for observer, done in rounds.items():
        lat = [x for r in done for x in r.latency]
        own = [x for r in done for x in r.stamped]
        stats[observer] = {"p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat)}
        ms = [pct(lat, 50), pct(lat, 95), max(lat), pct(own, 50), pct(own, 95)]
        rows.append([observer, len(lat), *(x * 1000 for x in ms)])
    print("\nms from the writer's close() to the row seen with status ok (polled every 20 ms);")
    print("'indexed_at': the row's own timestamp minus the close (wall clock, no poll delay)")
    table(["observer", "files", "p50", "p95", "max", "indexed_at p50", "indexed_at p95"], rows)
    ino, pol = stats["inotify"], stats["polling"]
    bound = interval + settle + 0.5
    print(
        f"\npolling, poll_interval {interval:g} s, settle_seconds {settle:g} s: "
        f"p50 {pol['p50'] / interval:.2f} x interval, p95 {pol['p95'] / interval:.2f} x interval "
        f"(design: up to 1 interval to notice, then settle_seconds: no close events)"
    )
    print(f"inotify p95 / polling p95: {ino['p95'] / pol['p95']:.3f}")
    complete = all(r.complete for done in rounds.values() for r in done)
    checks = [
        Check("inotify close->visible p95", ino["p95"], "< 1", "s", ino["p95"] < 1),
        Check("polling close->visible p95", pol["p95"], f"< {bound:g}", "s", pol["p95"] < bound),
        Check("all indexed, list agrees, exit 0", float(complete), "= 1", "", complete),
    ]
    return report("detection_latency", checks, {"files": files, "runs": runs, "stats": stats})


if __name__ == "__main__":
    raise SystemExit(main())
