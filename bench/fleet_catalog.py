"""Fleet catalog: `ckpt best` / `list --run` / `latest` on a PostgreSQL catalog of 1,000,000
checkpoints, and indexing throughput of 1 vs 3 `ckpt serve` daemons sharing one folder.

Issue 13 ("Done when", 2nd bullet). It starts its own PostgreSQL (tests/support/postgres.py:
pgserver from the `test` extra, or initdb/pg_ctl on PATH) in a temp folder, removed at the end.

1. Fill: one real `.keras` file is scanned by `ckpt scan` into a probe catalog; its rows (run,
   checkpoint, details JSON, metrics, `indexed` event) are the template every generated row
   copies, so the commands read ordinary rows. N rows (20,000 runs x 50 epochs for 1M; val_loss,
   loss, val_accuracy each; 2 % trashed, 1 % missing) go in with COPY, then ANALYZE. Foreign-key
   triggers are off during the COPY (session_replication_role = replica): the rows are
   consistent by construction, and the counts are checked after. The files `best`/`latest` stat
   (run R's 50, the 16 best val_loss overall) exist as sparse files of the row's size and mtime.
2. Whole commands as a user runs them (`ckpt --db URL ...`, fresh process each), interleaved
   with `python -c pass` and `ckpt --version`, medians; then each command's store call
   in-process (warm) and EXPLAIN (ANALYZE, BUFFERS) of every SQL statement it sent, to tell a
   slow start-up from a slow query.
3. M real `.keras` copies in 10 run folders; for 1 and for 3 daemons (distinct service.node,
   own state_dir, same catalog and root), a fresh catalog each: the time from start until every
   file has an `ok` row, files/s, and rows and `indexed` events (exactly M each).

    python3 bench/fleet_catalog.py [--rows 1000000] [--files 300] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from _common import CHILD_ENV, PYTHON, REPO, Check, interleaved, median, report, run_cmd, table

sys.path.insert(0, str(REPO))  # tests.support.postgres: the suite's own server starter

PER_RUN = 50
METRICS = ("val_loss", "loss", "val_accuracy")
SEED_FILE = "k3/run_zip/e01-vl1.683.keras"  # a tiny real Keras 3 .keras with Adam state
T0_NS = 1_764_547_200 * 10**9  # 2025-12-01 UTC: every generated row is older than "now"
TOP_FILES = 16  # the best val_loss rows overall that get a real (sparse) file
DAEMON_DEADLINE_S = 900  # a loaded 2-core machine: generous, the bench reports what it saw


def fixtures() -> Path:
    found = Path(os.environ.get("CKPT_TEST_FIXTURES", "/tmp/ckpt-fixtures"))
    if not (found / SEED_FILE).exists():
        raise SystemExit(f"{found / SEED_FILE} missing: set CKPT_TEST_FIXTURES to the fixtures")
    return found


def ckpt(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PYTHON, "-m", "ckpt_daemon", *args], capture_output=True, text=True, env=CHILD_ENV
    )
    if check and done.returncode != 0:
        raise SystemExit(f"ckpt {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def dsn(server: Any, url: str) -> str:
    return f"host={server.socket_dir} user=postgres dbname={url.split('@/')[1].split('?')[0]}"


def connect(server: Any, url: str) -> Any:
    import psycopg

    return psycopg.connect(dsn(server, url), autocommit=True)


# ---- 1. the catalog of N checkpoints ----


def template_rows(server: Any, work: Path) -> dict[str, dict[str, Any]]:
    """The rows `ckpt scan` writes for one real file: what every generated row copies."""
    url = server.fresh_url()
    root = work / "probe" / "exp"
    (root / "run-00001").mkdir(parents=True)
    shutil.copy(fixtures() / SEED_FILE, root / "run-00001" / "ckpt-epoch-0001.keras")
    config = work / "probe" / "config.yaml"
    config.write_text(f"database: {url}\nstate_dir: {work / 'probe-state'}\nroots:\n  - {root}\n")
    ckpt("--config", str(config), "scan")
    out: dict[str, dict[str, Any]] = {}
    with connect(server, url) as conn:
        for name in ("runs", "checkpoints", "events"):
            cur = conn.execute(f"SELECT * FROM {name} ORDER BY id LIMIT 1")
            out[name] = dict(zip([d.name for d in cur.description], cur.fetchone(), strict=True))
    server.drop(url)
    return out


def copy_text(value: Any) -> str:
    """One field in COPY's text format (\\N for NULL; backslash, tab, newline escaped)."""
    if value is None:
        return r"\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, dict | list):
        value = json.dumps(value)
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        text = text.replace("\r", "\\r")
    return text


def iso(ns: int) -> str:
    seconds = ns // 10**9
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ns // 10**6 % 1000:03d}Z"


def fleet_values(n_rows: int) -> dict[str, Any]:
    """Per checkpoint (numpy arrays, index = id - 1): run, epoch, metrics, status."""
    import numpy as np

    rng = np.random.default_rng(13)
    n_runs = -(-n_rows // PER_RUN)
    ids = np.arange(n_rows)
    run = ids // PER_RUN  # 0-based run index
    epoch = ids % PER_RUN + 1
    floor = rng.uniform(0.05, 0.6, n_runs)[run]
    speed = rng.uniform(5, 40, n_runs)[run]
    val_loss = floor + 2.0 * np.exp(-epoch / speed) + np.abs(rng.normal(0, 0.01, n_rows))
    draw = rng.random(n_rows)
    status = np.where(draw < 0.02, "trashed", np.where(draw < 0.03, "missing", "ok"))
    return {
        "n_runs": n_runs,
        "run": run,
        "epoch": epoch,
        "val_loss": np.round(val_loss, 6),
        "loss": np.round(val_loss * 0.92, 6),
        "val_accuracy": np.round(np.clip(1 - val_loss / 3, 0, 1), 6),
        "status": status,
    }


def real_file_ids(v: dict[str, Any], run_r: int) -> set[int]:
    """Ids (1-based) whose file exists: all of run R, and the best val_loss ok rows overall."""
    import numpy as np

    ok = np.flatnonzero(v["status"] == "ok")
    best = ok[np.argsort(v["val_loss"][ok], kind="stable")[:TOP_FILES]]
    in_r = np.flatnonzero(v["run"] == run_r)
    return {int(i) + 1 for i in (*best, *in_r)}


def fill(server: Any, url: str, root: Path, n_rows: int, tpl: dict[str, dict[str, Any]]) -> str:
    """COPY the catalog of `n_rows` checkpoints; returns run R's name (the one queried)."""
    v = fleet_values(n_rows)
    run_r = v["n_runs"] // 2
    name_r = f"run-{run_r + 1:05d}"
    real = real_file_ids(v, run_r)
    c, ev = tpl["checkpoints"], tpl["events"]
    ck_cols = [k for k in c if k not in ("id",)]
    details = dict(c["details"])
    for key in ("generations", "metric_sources", "epoch_source"):
        details.pop(key, None)
    # The JSON prefix every row shares (escaped once), then the per-row keys appended.
    details_head = copy_text(json.dumps(details))[:-1]
    sources = ', "metric_sources": {"val_loss": "training.log", "loss": "training.log", ' + (
        '"val_accuracy": "training.log"}, "epoch_source": "file name"'
    )
    steps = int(c["iterations"] or 3)
    run_details = copy_text(tpl["runs"]["details"])
    with connect(server, url) as conn:
        conn.execute("SET session_replication_role = replica")  # FK triggers off: see docstring
        with conn.transaction():
            cur = conn.cursor()
            with cur.copy("COPY runs (id, root, name, created_at, details) FROM STDIN") as cp:
                for r in range(v["n_runs"]):
                    at = iso(T0_NS + r * 3_600 * 10**9)
                    cp.write(f"{r + 1}\t{root}\trun-{r + 1:05d}\t{at}\t{run_details}\n")
            cols = ", ".join(["id", *ck_cols])
            # Metrics and events are spooled to files while the checkpoints stream (one COPY
            # at a time per connection), then streamed in turn: no 4M-line lists in memory.
            spool_m, spool_e = root.parent / "metrics.copy", root.parent / "events.copy"
            spool_m.parent.mkdir(parents=True, exist_ok=True)
            out_m, out_e = open(spool_m, "w"), open(spool_e, "w")  # noqa: SIM115
            run_of, epoch_of, status_of = (v[k].tolist() for k in ("run", "epoch", "status"))
            values = {m: v[m].tolist() for m in METRICS}
            with cur.copy(f"COPY checkpoints ({cols}) FROM STDIN") as cp:
                chunk: list[str] = []
                for i in range(n_rows):
                    cid, r, ep = i + 1, run_of[i], epoch_of[i]
                    path = f"{root}/run-{r + 1:05d}/ckpt-epoch-{ep:04d}.keras"
                    mtime = T0_NS + r * 3_600 * 10**9 + ep * 60 * 10**9 + cid % 997 * 10**6
                    size, inode = int(c["size_bytes"]), 50_000_000 + cid
                    if cid in real:
                        inode = sparse_file(Path(path), size, mtime)
                    seen = iso(mtime + 2 * 10**9)
                    status = status_of[i]
                    digest = f"blake3:{os.urandom(32).hex()}"
                    gen = (
                        f'"generations": [{{"generation": 1, "hash": "{digest}", '
                        f'"iterations": {ep * steps}, "mtime_ns": {mtime}, "indexed_at": '
                        f'"{seen}", "log_epochs": {ep}, "log_before": true, "epoch": null, '
                        '"step": null}]'
                    )
                    row = dict(c)
                    row.update(
                        run_id=r + 1,
                        path=path,
                        status=status,
                        reason="retention: not kept by keep_last 5, keep_best 3"
                        if status == "trashed"
                        else "gone from disk"
                        if status == "missing"
                        else None,
                        mtime_ns=mtime,
                        inode=inode,
                        hash=digest,
                        epoch=ep,
                        iterations=ep * steps,
                        first_seen_at=seen,
                        indexed_at=seen,
                        metrics_at=seen,
                    )
                    fields = [str(cid)]
                    for k in ck_cols:
                        if k == "details":
                            fields.append(f"{details_head}{sources}, {gen}}}")
                        else:
                            fields.append(copy_text(row[k]))
                    chunk.append("\t".join(fields) + "\n")
                    out_m.write(
                        "".join(f"{cid}\t{m}\t{values[m][i]!r}\ttraining.log\n" for m in METRICS)
                    )
                    out_e.write(
                        f"{cid}\t{seen}\tindexed\tdone\t{cid}\t{path}\t\\N\t{size}\t"
                        f"{copy_text(ev['actor'])}\t\\N\t\\N\n"
                    )
                    if len(chunk) >= 5_000:
                        cp.write("".join(chunk))
                        chunk.clear()
                cp.write("".join(chunk))
            out_m.close()
            out_e.close()
            event_cols = (
                "id, at, action, state, checkpoint_id, path, reason, bytes, actor, host, pid"
            )
            for spool, sql in (
                (spool_m, "COPY metrics (checkpoint_id, name, value, source) FROM STDIN"),
                (spool_e, f"COPY events ({event_cols}) FROM STDIN"),
            ):
                with cur.copy(sql) as cp, open(spool, "rb") as f:
                    while block := f.read(1 << 20):
                        cp.write(block)
                spool.unlink()
            for table_ in ("runs", "checkpoints", "events"):  # the next real insert's id
                conn.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table_}', 'id'), "
                    f"(SELECT max(id) FROM {table_}))"
                )
        conn.execute("SET session_replication_role = origin")
        conn.execute("ANALYZE")
    return name_r


def sparse_file(path: Path, size: int, mtime_ns: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return os.stat(path).st_ino


def counts(server: Any, url: str) -> dict[str, int]:
    with connect(server, url) as conn:
        one = lambda sql: int(conn.execute(sql).fetchone()[0])  # noqa: E731
        return {
            "runs": one("SELECT count(*) FROM runs"),
            "checkpoints": one("SELECT count(*) FROM checkpoints"),
            "ok": one("SELECT count(*) FROM checkpoints WHERE status = 'ok'"),
            "metrics": one("SELECT count(*) FROM metrics"),
            "indexed events": one("SELECT count(*) FROM events WHERE action = 'indexed'"),
            "orphan metrics": one(
                "SELECT count(*) FROM metrics m LEFT JOIN checkpoints c ON c.id = m.checkpoint_id "
                "WHERE c.id IS NULL"
            ),
            "MB": one("SELECT pg_database_size(current_database())") // 10**6,
        }


# ---- 2. the commands, and the SQL they send ----


def store_calls(url: str, run_r: str) -> dict[str, Any]:
    from ckpt_daemon.catalog.store import Store
    from ckpt_daemon.core.query import ListQuery

    store = Store(url)
    return {
        "best --metric val_loss": (store, lambda: store.reads.best("val_loss", "min")),
        "best --metric val_loss --run R": (
            store,
            lambda: store.reads.best("val_loss", "min", run_r),
        ),
        "list --run R --json": (store, lambda: store.reads.list(ListQuery(run=run_r))),
        "latest --run R": (store, lambda: store.reads.latest(run_r)),
    }


def explain(server: Any, url: str, run_r: str, repeats: int) -> dict[str, Any]:
    """Each command's store call in-process (warm medians), and EXPLAIN ANALYZE of every
    statement it sent (the slowest statement's plan printed)."""
    from sqlalchemy import event

    found: dict[str, Any] = {}
    for label, (store, call) in store_calls(url, run_r).items():
        sent: list[tuple[str, Any]] = []

        def listener(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
            sent.append((sql, params))  # noqa: B023 - removed before the loop moves on

        call()  # warm: the connection pool, the catalogs, the page cache
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            walls.append(time.perf_counter() - start)
        event.listen(store._engine, "before_cursor_execute", listener)
        call()
        event.remove(store._engine, "before_cursor_execute", listener)
        plans = []
        with connect(server, url) as conn:
            for sql, params in sent:
                if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                    continue
                lines = [
                    r[0]
                    for r in conn.execute(
                        ("EXPLAIN (ANALYZE, BUFFERS) " + sql).encode(), params
                    ).fetchall()
                ]
                ms = float(re.search(r"Execution Time: ([\d.]+)", lines[-1]).group(1))  # type: ignore[union-attr]
                plans.append((ms, sql, lines, params))
        plans.sort(key=lambda p: -p[0])
        found[label] = {
            "in_process_s": median(walls),
            "statements": len(sent),
            "sql_ms": sum(p[0] for p in plans),
            "slowest_ms": plans[0][0] if plans else 0.0,
            "slowest_plan": plans[0][2] if plans else [],
            "slowest_sql": plans[0][1] if plans else "",
            "slowest_params": plans[0][3] if plans else {},
        }
        store.close()
    return found


PROPOSED_INDEX = 'CREATE INDEX IF NOT EXISTS ix_runs_name_codepoint ON runs (name COLLATE "C")'


def runs_scan(plan: list[str]) -> str:
    """How a plan reads `runs` (Seq Scan, or which index)."""
    for line in plan:
        if " on runs" in line or "on ix_runs" in line or "on uq_runs" in line:
            return line.strip().split("  (")[0].lstrip("-> ")
    return "-"


FLOOR = (
    "import json, sys, psycopg\n"
    "with psycopg.connect(sys.argv[1]) as c:\n"
    "    c.execute(sys.argv[2].encode(), json.loads(sys.argv[3])).fetchall()"
)


def time_commands(
    url: str, run_r: str, repeats: int, conninfo: str, best_sql: dict[str, Any]
) -> dict[str, float]:
    exe = str(Path(PYTHON).with_name("ckpt"))
    if not Path(exe).exists():
        raise SystemExit(f"{exe} missing: pip install -e . in this interpreter's environment")
    best = [exe, "--db", url, "best", "--metric", "val_loss"]
    floor = [PYTHON, "-c", FLOOR, conninfo, best_sql["slowest_sql"]]
    floor.append(json.dumps(best_sql["slowest_params"]))
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "ckpt --version": [exe, "--version"],
        # What the PostgreSQL path must import before its first query (the SQLite path's hot
        # reads skip SQLAlchemy): tells our start-up apart from the libraries'.
        "python -c 'import psycopg'": [PYTHON, "-c", "import psycopg"],
        "python -c 'import sqlalchemy.orm'": [PYTHON, "-c", "import sqlalchemy.orm"],
        "python -c 'import ...catalog.store'": [PYTHON, "-c", "import ckpt_daemon.catalog.store"],
        # The floor of any PostgreSQL `best`: a fresh process, psycopg, connect, its main query.
        "psycopg alone: connect + best's query": floor,
        "best --metric val_loss": best,
        "best --metric val_loss --run R": [*best, "--run", run_r],
        "list --run R --json": [exe, "--db", url, "list", "--run", run_r, "--json"],
        "latest --run R": [exe, "--db", url, "latest", "--run", run_r],
    }
    timings = interleaved({n: partial(run_cmd, cmd) for n, cmd in commands.items()}, repeats)
    return {name: median(t.wall) for name, t in timings.items()}


# ---- 3. indexing throughput of 1 and 3 daemons ----


def shared_folder(work: Path, n_files: int) -> Path:
    root = work / "shared"
    seed = fixtures() / SEED_FILE
    for i in range(n_files):
        run = root / f"run-{i % 10:02d}"
        run.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed, run / f"ckpt-epoch-{i // 10 + 1:04d}.keras")
    return root


def fleet_case(server: Any, work: Path, root: Path, n_daemons: int, n_files: int) -> dict:
    url = server.fresh_url()
    procs, logs = [], []
    for k in range(n_daemons):
        home = work / f"case{n_daemons}" / f"node-{k}"
        home.mkdir(parents=True)
        (home / "config.yaml").write_text(
            f"database: {url}\nstate_dir: {home / 'state'}\nroots:\n  - path: {root}\n"
            "completion:\n  settle_seconds: 1\n  min_age_seconds: 0.2\n"
            f"service:\n  heartbeat: 1s\n  node: fleet-{n_daemons}-{k}\nschedule:\n  rescan: 0\n"
        )
        logs.append(home / "serve.log")
    start = time.perf_counter()
    for k, log in enumerate(logs):
        config = log.parent / "config.yaml"
        with open(log, "w") as out:
            procs.append(
                subprocess.Popen(
                    [PYTHON, "-m", "ckpt_daemon", "--config", str(config), "serve"],
                    stdout=out,
                    stderr=out,
                    env={**CHILD_ENV, "CKPT_ACTOR": f"bench@fleet-{n_daemons}-{k}"},
                )
            )
    first = all_ok = all_ready = None
    cpu = 0.0
    try:
        with connect(server, url) as conn:
            while time.perf_counter() - start < DAEMON_DEADLINE_S:
                ok = int(
                    conn.execute("SELECT count(*) FROM checkpoints WHERE status = 'ok'").fetchone()[
                        0
                    ]
                )
                now = time.perf_counter() - start
                if ok and first is None:
                    first = now
                if ok >= n_files and all_ok is None:
                    all_ok = now
                if all("event=ready" in log.read_text() for log in logs):
                    all_ready = all_ready or now
                if all_ok is not None and all_ready is not None:
                    break
                if any(p.poll() is not None for p in procs):
                    raise SystemExit(f"a daemon exited:\n{logs[0].read_text()[-3000:]}")
                time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:  # CPU of each daemon and its waited-for children (readers)
            _pid, _status, usage = os.wait4(p.pid, 0)
            cpu += usage.ru_utime + usage.ru_stime
    found = counts(server, url)
    by_actor = {}
    with connect(server, url) as conn:
        by_actor = dict(
            conn.execute(
                "SELECT actor, count(*) FROM events WHERE action = 'indexed' GROUP BY actor"
            ).fetchall()
        )
    server.drop(url)
    return {
        "first_row_s": first,
        "all_ok_s": all_ok,
        "all_ready_s": all_ready,
        "files_per_s": n_files / all_ok if all_ok else 0.0,
        "cpu_s": cpu,
        "rows": found["checkpoints"],
        "indexed_events": found["indexed events"],
        "events_by_daemon": by_actor,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, help="checkpoints in the catalog (default 1,000,000)")
    parser.add_argument("--files", type=int, help="files the daemons index (default 300)")
    parser.add_argument("--repeats", type=int, help="runs per command (default 5)")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 60 files, 3 repeats")
    parser.add_argument("--no-fleet", action="store_true", help="skip the daemons (part 3)")
    args = parser.parse_args()
    n_rows = args.rows or (20_000 if args.quick else 1_000_000)
    n_files = args.files or (60 if args.quick else 300)
    repeats = args.repeats or (3 if args.quick else 5)
    from tests.support.postgres import start_server

    work = Path(tempfile.mkdtemp(prefix="ckpt-fleet-"))
    server = start_server()
    try:
        return bench(server, work, n_rows, n_files, repeats, fleet=not args.no_fleet)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def bench(server: Any, work: Path, n_rows: int, n_files: int, repeats: int, fleet: bool) -> int:
    print(f"PostgreSQL via {server.how}, socket {server.socket_dir}")
    tpl = template_rows(server, work)
    url = server.fresh_url()
    start = time.perf_counter()
    run_r = fill(server, url, work / "data" / "exp", n_rows, tpl)
    fill_s = time.perf_counter() - start
    found = counts(server, url)
    print(f"\nfilled in {fill_s:.1f} s (COPY + ANALYZE); run R = {run_r}")
    table(["table", "rows"], [[k, v] for k, v in found.items()])
    assert found["checkpoints"] == n_rows and found["orphan metrics"] == 0, found

    sql = explain(server, url, run_r, repeats)
    med = time_commands(url, run_r, repeats, dsn(server, url), sql["best --metric val_loss"])
    base = med["python -c pass"]
    targets = {"best --metric val_loss": 0.3, "list --run R --json": 0.5}
    print(f"\n{n_rows:,} checkpoints; wall medians of {repeats} interleaved fresh processes")
    table(
        ["command", "wall s", "x python", "x ckpt --version", "in-process s", "SQL ms", "target"],
        [
            [
                name,
                m,
                m / base,
                m / med["ckpt --version"],
                sql[name]["in_process_s"] if name in sql else "",
                sql[name]["sql_ms"] if name in sql else "",
                f"< {targets[name]} s" if name in targets else "",
            ]
            for name, m in med.items()
        ],
    )
    for name, doc in sql.items():
        print(
            f"\n{name}: {doc['statements']} statements, {doc['sql_ms']:.1f} ms of SQL; slowest "
            f"({doc['slowest_ms']:.1f} ms):\n  {doc['slowest_sql'][:600]}"
        )
        print("\n".join("    " + ln for ln in doc["slowest_plan"][:40]))

    # The index proposed for migration 0007 (store_reads.in_run compares both arms in code
    # point order so that it can serve them): the same SQL, measured again with it.
    with connect(server, url) as conn:
        conn.execute(PROPOSED_INDEX)
        conn.execute("ANALYZE runs")
    indexed = explain(server, url, run_r, repeats)
    print(f"\nwith the proposed index ({PROPOSED_INDEX}):")
    table(
        ["command", "SQL ms before", "SQL ms with it", "slowest plan's first scan on runs"],
        [
            [name, sql[name]["sql_ms"], doc["sql_ms"], runs_scan(doc["slowest_plan"])]
            for name, doc in indexed.items()
        ],
    )
    checks = [
        Check(f"{name} wall", med[name], f"< {t}", "s", med[name] < t)
        for name, t in targets.items()
    ]
    cases: dict[str, Any] = {}
    if fleet:
        root = shared_folder(work, n_files)
        for n in (1, 3):
            cases[f"{n} daemon(s)"] = fleet_case(server, work, root, n, n_files)
        print(f"\nindexing {n_files} real .keras files in 10 run folders, fresh catalog each:")
        table(
            [
                "case",
                "first row s",
                "all ok s",
                "all ready s",
                "files/s",
                "rows",
                "indexed ev",
                "CPU s (all daemons)",
                "indexed events by daemon",
            ],
            [
                [
                    name,
                    c["first_row_s"],
                    c["all_ok_s"],
                    c["all_ready_s"],
                    c["files_per_s"],
                    c["rows"],
                    c["indexed_events"],
                    c["cpu_s"],
                    json.dumps(c["events_by_daemon"]),
                ]
                for name, c in cases.items()
            ],
        )
        for name, c in cases.items():
            checks.append(
                Check(f"{name}: rows", c["rows"], f"== {n_files}", "rows", c["rows"] == n_files)
            )
            checks.append(
                Check(
                    f"{name}: indexed events",
                    c["indexed_events"],
                    f"== {n_files}",
                    "events",
                    c["indexed_events"] == n_files,
                )
            )
        one, three = cases["1 daemon(s)"], cases["3 daemon(s)"]
        if one["all_ok_s"] and three["all_ok_s"]:
            print(
                f"3 daemons / 1 daemon, time to all ok: {three['all_ok_s'] / one['all_ok_s']:.2f}"
            )
    facts = {
        "rows": n_rows,
        "fill_s": fill_s,
        "counts": found,
        "run_r": run_r,
        "medians": med,
        "ratio_to_python": {k: v / base for k, v in med.items()},
        "sql": {k: {x: y for x, y in d.items() if x != "slowest_plan"} for k, d in sql.items()},
        "plans": {k: d["slowest_plan"] for k, d in sql.items()},
        "fleet": cases,
        "sql_with_proposed_index": {k: d["sql_ms"] for k, d in indexed.items()},
    }
    return report("fleet_catalog", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
