"""The pipeline's latency and overhead.

1. Completion to stage start: a live `ckpt serve` with one stage whose child only notes the
   time it started; checkpoints (real torch files) appear one at a time, each renamed into the
   run whole. Per checkpoint: from the moment the catalog recorded it complete (`indexed_at`,
   after the settle time the config asks for) to its stage's start, and from its rename. Target:
   p95 < 2 s from completion on a quiet machine.
2. The queue's overhead per job, in process on an SQLite catalog: make, claim and record a job
   (three write transactions), against a floor measured in the same run: three bare SQLite
   write transactions (BEGIN IMMEDIATE, one INSERT or UPDATE, COMMIT with synchronous=FULL, as
   the catalog runs them) on a table of the same shape.

    python3 bench/pipeline_latency.py [--checkpoints 30] [--jobs 300]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, Check, Launcher, machine, report, table

STAMP = (
    "import sys, time; open(sys.argv[1] + '/' + sys.argv[2] + '.t', 'w').write(repr(time.time()))"
)


def _iso_seconds(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def latency(base: Path, count: int) -> dict[str, list[float]]:
    from pipeline_kills import write_checkpoints

    stamps, staging, run = base / "stamps", base / "staging", base / "runs" / "exp"
    stamps.mkdir()
    run.mkdir(parents=True)
    write_checkpoints(staging, count)
    command = [PYTHON, "-S", "-c", STAMP, str(stamps), "{id}"]
    config = base / "config.yaml"
    config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {base / 'runs'}\n"
        "completion:\n  settle_seconds: 0.5\n  min_age_seconds: 0.1\n"
        "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
        f"pipeline:\n  - name: stamp\n    command: {json.dumps(command)}\n    concurrency: 2\n"
    )
    launcher = Launcher()
    renamed: dict[str, float] = {}
    with open(base / "serve.log", "ab") as log:
        daemon = launcher.start(
            ["--config", str(config), "serve"], env=dict(os.environ), cwd=base, stderr=log.fileno()
        )
        try:
            _wait(lambda: b"event=ready" in (base / "serve.log").read_bytes(), 60)
            for source in sorted(staging.iterdir()):
                target = run / source.name
                os.replace(source, target)
                renamed[str(target)] = time.time()
                time.sleep(0.5)
            _wait(lambda: len(list(stamps.iterdir())) >= count, 120)
            rows = launcher.run(
                ["--config", str(config), "list", "--json"],
                env=dict(os.environ),
                cwd=base,
                timeout=60,
            )
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    from_index, from_rename = [], []
    for row in json.loads(rows.stdout):
        started = float((stamps / f"{row['id']}.t").read_text())
        from_index.append(started - _iso_seconds(row["indexed_at"]))
        from_rename.append(started - renamed[row["path"]])
    return {"from_index": from_index, "from_rename": from_rename}


def _wait(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.05)


def overhead(base: Path, jobs: int) -> dict[str, float]:
    """Seconds per job: our queue's make + claim + record, and the bare-SQLite floor."""
    from ckpt_daemon.catalog.store import Store
    from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord

    store = Store(f"sqlite:///{base / 'queue.db'}")
    ids = [
        store.index.record(
            IndexRecord(
                path=f"/r/run/{i}.pt",
                root="/r",
                run="run",
                status=CheckpointStatus.OK,
                reason=None,
                stat=FileStat(1, i, i),
                hash=f"h{i}",
            ),
            actor_name="bench",
            at="2026-01-01T00:00:00.000Z",
        )
        for i in range(jobs)
    ]
    queue = store.stage_jobs
    start = time.perf_counter()
    for ckpt_id in ids:
        queue.make([(ckpt_id, f"h{ckpt_id}", "eval")])
        (job,) = queue.claim(["eval"], "bench:1", 60)
        queue.finish(
            job,
            state="done",
            error=None,
            output="",
            result={"metrics": {"eval:x": 1.0}},
            metrics_by_name={"eval:x": 1.0},
        )
    ours = (time.perf_counter() - start) / jobs
    store.close()
    floor_db = sqlite3.connect(base / "floor.db", isolation_level=None)
    floor_db.execute("PRAGMA journal_mode=WAL")
    floor_db.execute("PRAGMA synchronous=FULL")
    floor_db.execute("CREATE TABLE j (id INTEGER PRIMARY KEY, c INT, s TEXT, state TEXT, r TEXT)")
    start = time.perf_counter()
    for i in range(jobs):
        for statement, args in (
            ("INSERT INTO j (c, s, state) VALUES (?, 'eval', 'pending')", (i,)),
            ("UPDATE j SET state = 'running' WHERE c = ?", (i,)),
            ("UPDATE j SET state = 'done', r = '{}' WHERE c = ?", (i,)),
        ):
            floor_db.execute("BEGIN IMMEDIATE")
            floor_db.execute(statement, args)
            floor_db.execute("COMMIT")
    floor = (time.perf_counter() - start) / jobs
    floor_db.close()
    return {"ours": ours, "floor": floor}


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=300)
    opts = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="ckpt-pipeline-latency-") as tmp:
        (Path(tmp) / "latency").mkdir()
        lat = latency(Path(tmp) / "latency", opts.checkpoints)
        cost = overhead(Path(tmp), opts.jobs)
    rows = [[name, statistics.median(v), p95(v), max(v)] for name, v in lat.items()]
    table(["stage start after (s)", "median", "p95", "max"], rows)
    table(
        ["per job (ms)", "ours", "floor", "ratio"],
        [
            [
                "make+claim+record",
                cost["ours"] * 1e3,
                cost["floor"] * 1e3,
                cost["ours"] / cost["floor"],
            ]
        ],
    )
    checks = [
        Check(
            "stage start after completion, p95",
            p95(lat["from_index"]),
            "< 2",
            "s",
            p95(lat["from_index"]) < 2.0,
        ),
    ]
    return report(
        "pipeline_latency",
        checks,
        {"per_job_ms": cost["ours"] * 1e3, "floor_ms": cost["floor"] * 1e3},
    )


if __name__ == "__main__":
    sys.exit(main())
