"""Issue 8, retention execution: pins against a running prune, the trash folder reconciled with
the catalog, trash records that outlive their path, stale leases and planned events of dead
processes, and prune reports that count only what moved. Real files, real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog.audit import now_iso
from tests.support import ZIP_FILES, ZIP_RUN, Workspace, zip_run

pytestmark = pytest.mark.slow
RUN, FILES = ZIP_RUN, ZIP_FILES


@pytest.fixture
def zips(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    return zip_run(workspace, keras_checkpoints)


def catalog(ws: Workspace) -> sqlite3.Connection:
    return sqlite3.connect(ws.base / "state" / "catalog.db")


def by_name(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list", "--all")}


def cli(ws: Workspace, *args: str) -> list[str]:
    return [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args]


def many_checkpoints(ws: Workspace, fixtures: Path, run: str, n: int) -> list[Path]:
    """`n` real `.keras` checkpoints (copies of one epoch, each its own file), epochs 1..n."""
    folder = ws.root / run
    folder.mkdir(parents=True)
    paths = []
    for epoch in range(1, n + 1):
        path = folder / f"e{epoch:02d}-vl{2 - epoch / 100:.3f}.keras"
        shutil.copyfile(fixtures / RUN / FILES[0], path)
        os.utime(path, ns=(10**18 + epoch * 10**9, 10**18 + epoch * 10**9))
        paths.append(path)
    return paths


def append_keeping_mtime(path: Path) -> None:
    """Change a file's bytes after it was indexed, as a writer would, but not its age."""
    info = path.stat()
    with open(path, "ab") as f:
        f.write(b"appended after indexing")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ---- item 2: an acknowledged pin always protects ----

PINNER = """
import json, sqlite3, sys, time
from ckpt_daemon.api import open_catalog
config, db, run = sys.argv[1], sys.argv[2], sys.argv[3]
conn = sqlite3.connect(db)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # start pinning once the prune has begun to trash
    if conn.execute("SELECT count(*) FROM checkpoints WHERE status = 'trashed'").fetchone()[0]:
        break
    time.sleep(0.002)
ids = [r[0] for r in conn.execute(
    "SELECT c.id FROM checkpoints c JOIN runs r ON r.id = c.run_id "
    "WHERE r.name = ? AND c.status = 'ok' ORDER BY c.mtime_ns", (run,))]
with open_catalog(config) as cat:
    for checkpoint_id in ids:  # the prune's own order: oldest first, at its frontier
        c = cat.pin(checkpoint_id)
        print(json.dumps({"id": c.id, "status": c.status.value, "pinned": c.pinned}), flush=True)
"""


def test_a_pin_acknowledged_during_a_prune_is_never_trashed(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    raced = 0
    for attempt in range(3):
        run = f"race{attempt}"
        many_checkpoints(workspace, keras_checkpoints, run, 40)
        workspace.run("scan", str(workspace.root / run))
        db = workspace.base / "state" / "catalog.db"
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        pinner = subprocess.Popen(
            [sys.executable, "-c", PINNER, str(workspace.config), str(db), run],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        pruner = subprocess.Popen(
            cli(workspace, "prune", "--run", run, "--keep-last", "1", "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        prune_out, prune_err = pruner.communicate(timeout=300)
        pin_out, pin_err = pinner.communicate(timeout=300)
        assert pinner.returncode == 0, pin_err
        assert pruner.returncode in (0, 3), prune_err
        acknowledged = [json.loads(line) for line in pin_out.splitlines()]
        status = {r["id"]: r for r in workspace.json("list", "--all", "--run", run)}
        for ack in acknowledged:
            if ack["status"] == "ok":  # acknowledged as a pin of a live checkpoint
                assert status[ack["id"]]["status"] == "ok", (ack, prune_out)
                assert Path(status[ack["id"]]["path"]).exists()
                raced += 1
        for row in status.values():  # what the prune trashed is in the trash, and only that
            assert Path(row["path"]).exists() == (row["status"] == "ok"), row
        trashed_ids = {t["id"] for t in workspace.json("trash", "list") if t["run"] == run}
        assert trashed_ids == {i for i, r in status.items() if r["status"] == "trashed"}
        failures = json.loads(prune_out)["failures"]
        assert all("pinned" in f["error"] for f in failures), failures
    assert raced > 0  # some pins did land while the prunes ran


def test_purge_never_deletes_a_pinned_trashed_checkpoint(zips: Workspace) -> None:
    zips.run("prune", "--run", RUN, "--keep-last", "1")
    trashed = {Path(t["path"]).name: t for t in zips.json("trash", "list")}
    pinned = trashed[FILES[0]]
    result = zips.run("pin", str(pinned["id"]))
    assert "trash" in result.stdout  # the pin says where the checkpoint is
    done = zips.json("trash", "purge", "--older-than", "0s")
    assert [Path(p["path"]).name for p in done["purged"]] == [FILES[1]]
    assert all(Path(p).exists() for p in pinned["paths"])
    rows = {r["id"]: r for r in zips.json("list", "--all")}
    assert rows[pinned["id"]]["status"] == "trashed" and rows[pinned["id"]]["pinned"] is True
    zips.run("trash", "restore", str(pinned["id"]))
    assert (zips.root / RUN / FILES[0]).exists()


# ---- item 17: the trash folder is reconciled with the catalog ----


def test_a_file_left_in_the_trash_by_a_killed_prune_is_trashed_after_a_scan(
    zips: Workspace,
) -> None:
    original = zips.root / RUN / FILES[0]
    content = original.read_bytes()
    batch = "20261130T120000Z-4242"
    trashed = zips.root / ".ckpt-trash" / batch / RUN / FILES[0]
    trashed.parent.mkdir(parents=True)
    os.rename(original, trashed)  # what fsops.move_to_trash does; the catalog never heard of it
    zips.run("scan")
    row = by_name(zips)[FILES[0]]
    assert row["status"] == "trashed", row
    (item,) = zips.json("trash", "list")
    assert item["paths"] == [str(trashed)] and item["batch"] == batch
    assert item["at"].startswith("2026-11-30T12:00:00")
    zips.run("trash", "restore", str(original))
    assert original.read_bytes() == content
    assert by_name(zips)[FILES[0]]["status"] in ("ok", "incomplete")
    zips.run("scan")
    assert by_name(zips)[FILES[0]]["status"] == "ok"
    assert not (zips.root / ".ckpt-trash" / batch).exists()


def test_an_orphan_in_the_trash_is_purgeable_and_its_planned_event_closed(
    zips: Workspace,
) -> None:
    original = zips.root / RUN / FILES[1]
    size = original.stat().st_size
    batch = "20200101T000000Z-4243"
    trashed = zips.root / ".ckpt-trash" / batch / RUN / FILES[1]
    trashed.parent.mkdir(parents=True)
    row_id = by_name(zips)[FILES[1]]["id"]
    with catalog(zips) as conn:  # the prune had planned the move, then died after the rename
        conn.execute(
            "INSERT INTO events (at, action, state, checkpoint_id, path, reason, bytes, actor)"
            " VALUES ('2020-01-01T00:00:00.000Z', 'trash', 'planned', ?, ?, NULL, ?, 'x@y')",
            (row_id, str(original), size),
        )
    os.rename(original, trashed)
    zips.run("scan")  # marks nothing missing: the file is in the trash
    assert by_name(zips)[FILES[1]]["status"] == "trashed"
    events = [e for e in zips.json("log") if e["action"] == "trash"]
    assert [e["state"] for e in events] == ["done"]
    done = zips.json("trash", "purge", "--older-than", "1d")
    assert [p["id"] for p in done["purged"]] == [row_id] and not trashed.exists()


# ---- item 18: a trash record outlives whatever appears at its old path ----


def test_a_new_file_at_a_trashed_path_keeps_the_trash_record(zips: Workspace) -> None:
    path = zips.root / RUN / FILES[0]
    original = path.read_bytes()
    zips.run("prune", "--run", RUN, "--keep-last", "1")
    shutil.copyfile(zips.root / RUN / FILES[2], path)  # the trainer writes that name again
    zips.run("scan")
    items = {Path(t["path"]).name: t for t in zips.json("trash", "list")}
    assert set(items) == {FILES[0], FILES[1]}
    assert Path(items[FILES[0]]["paths"][0]).read_bytes() == original
    listed = [r for r in zips.json("list", "--all") if r["path"] == str(path)]
    assert sorted(r["status"] for r in listed) == ["ok", "trashed"]
    refused = zips.run("trash", "restore", str(path), check=False)
    assert refused.returncode in (2, 3), refused.stderr
    assert "exists" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    path.unlink()
    zips.run("scan")  # the new one is missing now; the trash record still there
    zips.run("trash", "restore", str(path))
    assert path.read_bytes() == original
    zips.run("scan")
    live = [r for r in zips.json("list", "--all") if r["path"] == str(path) and r["status"] == "ok"]
    assert len(live) == 1
    assert len(zips.json("trash", "list")) == 1


# ---- item 19: stale leases and planned events of dead processes ----


def test_a_lease_of_a_dead_local_process_is_free_at_once(zips: Workspace) -> None:
    with catalog(zips) as conn:
        run_id = conn.execute("SELECT id FROM runs WHERE name = ?", (RUN,)).fetchone()[0]
        until = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600))
        columns = {r[1] for r in conn.execute("PRAGMA table_info(leases)")}
        values = {
            "run_id": run_id,
            "holder": f"someone@{socket.gethostname()} pid {dead_pid()}",
            "acquired_at": "2026-01-01T00:00:00.000Z",
            "expires_at": until,
            "host": socket.gethostname(),
            "pid": dead_pid(),
        }
        values = {k: v for k, v in values.items() if k in columns}
        conn.execute(
            f"INSERT INTO leases ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            list(values.values()),
        )
    result = zips.run("prune", "--run", RUN, "--keep-last", "1", check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(r["status"] for r in by_name(zips).values()) == ["ok", "trashed", "trashed"]


def test_a_killed_prune_leaves_no_lease_and_no_planned_event(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    killed = False
    for attempt in range(5):
        run = f"kill{attempt}"
        many_checkpoints(workspace, keras_checkpoints, run, 30)
        workspace.run("scan", str(workspace.root / run))
        proc = subprocess.Popen(
            cli(workspace, "prune", "--run", run, "--keep-last", "1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with catalog(workspace) as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                trashing = conn.execute(
                    "SELECT count(*) FROM events WHERE action = 'trash'"
                ).fetchone()[0]
                if trashing >= 3 * (attempt + 1):
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.001)
        proc.wait()
        with catalog(workspace) as conn:  # killed while it held the run's lease
            held = (
                conn.execute(
                    "SELECT count(*) FROM leases WHERE expires_at > ?", (now_iso(),)
                ).fetchone()[0]
                == 1
            )
        if proc.returncode == -signal.SIGKILL and held:
            killed = True
            break
    assert killed, "every prune finished before it could be killed"
    result = workspace.run("prune", "--run", run, "--keep-last", "1", check=False)
    assert result.returncode == 0, result.stderr  # not 4: the holder is dead
    events = workspace.json("log", "--run", run, "--limit", "1000")
    states = {e["state"] for e in events if e["action"] == "trash"}
    assert states <= {"done", "abandoned"}, states
    rows = workspace.json("list", "--all", "--run", run)
    assert sorted(r["status"] for r in rows).count("ok") == 1
    trash = {t["id"]: t for t in workspace.json("trash", "list")}
    for row in rows:  # every checkpoint is where the catalog says
        if row["status"] == "ok":
            assert Path(row["path"]).exists()
        else:
            assert row["status"] == "trashed" and not Path(row["path"]).exists()
            assert all(Path(p).exists() for p in trash[row["id"]]["paths"])


def test_planned_events_of_dead_processes_are_closed_at_the_next_start(zips: Workspace) -> None:
    row_id = by_name(zips)[FILES[0]]["id"]
    with catalog(zips) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
        values: dict[str, Any] = {
            "at": "2026-01-01T00:00:00.000Z",
            "action": "compress",
            "state": "planned",
            "checkpoint_id": row_id,
            "path": str(zips.root / RUN / FILES[0]),
            "actor": "x@y",
            "host": socket.gethostname(),
            "pid": dead_pid(),
        }
        values = {k: v for k, v in values.items() if k in columns}
        conn.execute(
            f"INSERT INTO events ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            list(values.values()),
        )
    zips.run("serve", "--once")
    (compress,) = [e for e in zips.json("log") if e["action"] == "compress"]
    assert compress["state"] == "abandoned", compress


# ---- item 22: a prune reports only what moved ----


def test_prune_counts_only_what_actually_moved(zips: Workspace) -> None:
    append_keeping_mtime(zips.root / RUN / FILES[0])
    moved_size = (zips.root / RUN / FILES[1]).stat().st_size
    result = zips.run("prune", "--run", RUN, "--keep-last", "1", "--json", check=False)
    assert result.returncode == 3
    doc = json.loads(result.stdout)
    (run,) = doc["runs"]
    assert run["bytes_freed"] == moved_size
    assert [Path(f["path"]).name for f in doc["failures"]] == [FILES[0]]
    # the plain report too (on a fresh run: the same situation)
    zips.run("trash", "restore", str(zips.root / RUN / FILES[1]))
    zips.run("scan")
    append_keeping_mtime(zips.root / RUN / FILES[1])
    text = zips.run("prune", "--run", RUN, "--keep-last", "1", check=False)
    assert text.returncode == 3
    lines = text.stdout.splitlines()  # a line per act as it happens, then the report
    assert [ln.split()[0] for ln in lines[:2]] == ["trashed", "failed"], text.stdout
    assert f"{RUN}: 1 of 3 trashed" in lines[2], text.stdout


# ---- the catalog migration these need ----


def test_migration_0002_keeps_every_row_both_ways(zips: Workspace) -> None:
    from ckpt_daemon.catalog import db

    zips.run("prune", "--run", RUN, "--keep-last", "1")
    url = f"sqlite:///{zips.base / 'state' / 'catalog.db'}"
    tables = ("runs", "checkpoints", "metrics", "events", "artifacts")

    def counts() -> dict[str, int]:
        with catalog(zips) as conn:
            return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}

    before = counts()
    assert before["checkpoints"] == 3 and before["events"] > 3
    db.downgrade(url, "0001")
    assert counts() == before
    db.upgrade(url)
    assert counts() == before
    with catalog(zips) as conn:
        assert {"host", "pid"} <= {r[1] for r in conn.execute("PRAGMA table_info(leases)")}
    assert sorted(r["status"] for r in zips.json("list", "--all")) == ["ok", "trashed", "trashed"]
