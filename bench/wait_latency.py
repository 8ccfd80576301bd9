"""`ckpt wait` wake-up latency: from a save's completion to the path printed by the waiter.

A fresh SQLite catalog (and, with `--postgres URL`, that PostgreSQL catalog too) and a running
`ckpt serve` on its root, as in production. Each round: a `ckpt wait --run dcp --newer-than N`
subprocess is started and given time to arm (its inotify watch seen in /proc, then 0.5 s); the
"save" is a real DCP folder (written once by torch.distributed.checkpoint in a child,
tests/support/async_saves.py) copied in under a
temporary name and renamed to `step-<N+1>`: the rename is the save's completion. The daemon
sees it (inotify), indexes it (its reader child, kept running), commits; the waiter wakes on the
commit (inotify on the catalog file + `PRAGMA data_version`, or PostgreSQL NOTIFY) and prints.
The latency is from the rename to the line the waiter prints, checked: p95 < 1 s.

"p95 from commit" is the wait's own part: from the moment the `ok` row is visible in the catalog
(SQLite: polled every 5 ms by the bench) to the printed path; the rest is the daemon's indexing.
`--no-daemon` indexes each save with an in-process `Catalog.scan` instead (a reader child started
per scan): shown from the rename and from the scan's return.

    python3 bench/wait_latency.py [--rounds 20] [--postgres URL] [--no-daemon]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, report, table

sys.path.insert(0, str(REPO))

ARM_S = 0.5  # after the waiter's waker is armed: its first look at the catalog


def dcp_folder() -> Path:
    from tests.support.async_saves import generate

    made = OUT / "wait-latency" / "dcp-source"
    if not (made / "dcp" / "step-7" / ".metadata").is_file():
        generate("dcp", made)
    return made / "dcp" / "step-7"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def workspace(database: str) -> tuple[Path, Path, list[str]]:
    base = Path(tempfile.mkdtemp(prefix="wait-latency-"))
    root = base / "runs"
    (root / "dcp").mkdir(parents=True)
    config = base / "config.yaml"
    config.write_text(
        f"state_dir: {base / 'state'}\ndatabase: {database}\nroots:\n  - path: {root}\n"
        "service:\n  heartbeat: 1s\n"
    )
    cmd = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
    subprocess.run([*cmd, "scan"], check=True, capture_output=True, env=CHILD_ENV)
    return base, root, cmd


def serve(base: Path, cmd: list[str]) -> subprocess.Popen[bytes]:
    """`ckpt serve`, once it logged `ready`."""
    log = (base / "serve.log").open("wb")
    daemon = subprocess.Popen([*cmd, "serve"], stdout=log, stderr=log, env=CHILD_ENV)
    deadline = time.monotonic() + 120
    while b"event=ready" not in (base / "serve.log").read_bytes():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"ckpt serve did not start:\n{(base / 'serve.log').read_text()}")
        time.sleep(0.1)
    return daemon


def armed(pid: int, database: str) -> None:
    """Until the waiter has armed its waker (SQLite: its inotify watch on the catalog exists;
    it looks at the catalog after that), then ARM_S more. A loaded machine takes seconds to
    start a `ckpt wait`: a save landing before it looked would be measured from its start-up.
    PostgreSQL: its LISTEN is not visible from here, so a generous fixed time."""
    if not database.startswith("sqlite"):
        time.sleep(5.0)
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:  # an fd closed meanwhile: look again
            links = []
        if "anon_inode:inotify" in links:
            break
        time.sleep(0.01)
    time.sleep(ARM_S)


def commit_seen(base: Path, final: Path) -> float:
    """When the daemon's commit of `final` as `ok` became visible (SQLite: polled every 5 ms
    on a read-only connection; nan for another catalog)."""
    db = base / "state" / "catalog.db"
    if not db.is_file():
        return float("nan")
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT 1 FROM checkpoints WHERE path = ? AND status = 'ok'", (str(final),)
            ).fetchone()
            if row is not None:
                return time.monotonic()
            time.sleep(0.005)
    finally:
        conn.close()
    return float("nan")


def rounds(
    database: str, source: Path, count: int, with_daemon: bool
) -> tuple[list[float], list[float]]:
    """Per round: seconds from the rename to the printed path, and (no daemon) from the
    in-process scan's return to it."""
    from ckpt_daemon.api import open_catalog

    base, root, cmd = workspace(database)
    daemon = serve(base, cmd) if with_daemon else None
    from_save: list[float] = []
    from_commit: list[float] = []
    try:
        with open_catalog(str(base / "config.yaml")) as cat:
            for step in range(1, count + 1):
                wait = [*cmd, "wait", "--run", "dcp", "--newer-than", str(step - 1)]
                waiter = subprocess.Popen(
                    [*wait, "--timeout", "60s"], stdout=subprocess.PIPE, text=True, env=CHILD_ENV
                )
                armed(waiter.pid, database)
                tmp = root / "dcp" / f".incoming-{step}"
                shutil.copytree(source, tmp)
                final = root / "dcp" / f"step-{step}"
                tmp.rename(final)
                saved = time.monotonic()
                if daemon is None:
                    cat.scan([str(final)])
                    committed = time.monotonic()
                else:
                    committed = commit_seen(base, final)
                assert waiter.stdout is not None
                line = waiter.stdout.readline().strip()
                printed = time.monotonic()
                waiter.wait(timeout=30)
                if line != str(final):
                    raise SystemExit(f"round {step}: the waiter printed {line!r}, not {final}")
                from_save.append(printed - saved)
                from_commit.append(max(0.0, printed - committed))  # nan: not seen
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
    shutil.rmtree(base, ignore_errors=True)
    return from_save, from_commit


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--postgres", help="a PostgreSQL catalog URL at head to measure too")
    parser.add_argument(
        "--no-daemon", action="store_true", help="index each save with an in-process scan"
    )
    args = parser.parse_args()
    source = dcp_folder()
    backends = {"sqlite": "sqlite:///{state_dir}/catalog.db"}
    if args.postgres:
        backends["postgresql"] = args.postgres
    rows, checks = [], []
    for name, url in backends.items():
        from_save, from_commit = rounds(url, source, args.rounds, not args.no_daemon)
        print(f"{name}: from save {' '.join(f'{v:.2f}' for v in from_save)}", flush=True)
        print(f"{name}: from commit {' '.join(f'{v:.2f}' for v in from_commit)}", flush=True)
        if args.no_daemon:
            rows.append([name, "in-process scan", args.rounds, f"{p95(from_save):.3f}",
                         f"{max(from_save):.3f}", f"{p95(from_commit):.3f}"])  # fmt: skip
            # The wait's own part: from the catalog's commit (the scan's return comes after
            # it) to the printed path; from the save it includes a reader child's start.
            value = p95(from_commit)
            checks.append(Check(f"wait wake-up p95 ({name}, from the scan)", value, "< 1", "s",
                                value < 1.0))  # fmt: skip
            continue
        seen = [v for v in from_commit if not math.isnan(v)]
        rows.append([name, "ckpt serve", args.rounds, f"{p95(from_save):.3f}",
                     f"{max(from_save):.3f}", f"{p95(seen):.3f}" if seen else "-"])  # fmt: skip
        value = p95(from_save)
        checks.append(Check(f"save -> printed path p95 ({name})", value, "< 1", "s", value < 1.0))
    table(["catalog", "indexed by", "rounds", "p95 from save (s)", "max (s)",
           "p95 from commit (s)"], rows)  # fmt: skip
    facts = {"rounds": args.rounds, "arm_s": ARM_S, "daemon": not args.no_daemon}
    return report("wait_latency", checks, facts)


if __name__ == "__main__":
    sys.exit(main())
