"""`ckpt serve` as a real subprocess: live Keras training, half-written files, signals, restarts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace, service_workspace

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
H5_CKPT = "tfk/run_h5/weights.01-1.69.hdf5"
ZIP_CKPT = "k3/run_zip/e01-vl1.683.keras"


def listed(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all")}


def catalog_rows(ws: Workspace, query: str) -> list[Any]:
    import sqlite3

    with sqlite3.connect(ws.base / "state" / "catalog.db") as conn:
        return conn.execute(query).fetchall()


def catalog_paths(ws: Workspace) -> set[str]:
    """Straight from the SQLite file: for when the config file on disk is invalid on purpose."""
    import sqlite3

    with sqlite3.connect(ws.base / "state" / "catalog.db") as conn:
        return {row[0] for row in conn.execute("SELECT path FROM checkpoints")}


def test_live_keras_training_is_indexed_with_metrics(daemon_ws: Any) -> None:
    ws, daemon = daemon_ws
    epochs = 3
    train = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "train_keras.py"),
            str(ws.root / "demo"),
            "--epochs",
            str(epochs),
            "--epoch-seconds",
            "1.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stderr
    csv_rows = (ws.root / "demo" / "training.log").read_text().splitlines()[1:]
    assert len(csv_rows) == epochs

    def all_there() -> bool:
        rows = listed(ws)
        epoch_files = [r for p, r in rows.items() if p.startswith("demo/model.")]
        return len(epoch_files) == epochs and all(
            r["status"] == "ok" and "loss" in r["metrics"] for r in epoch_files
        )

    daemon.wait_until(all_there, 30, "every epoch checkpoint, with CSV metrics")
    rows = listed(ws)
    header = (ws.root / "demo" / "training.log").read_text().splitlines()[0].split(",")
    for line in csv_rows:
        values = dict(zip(header, line.split(","), strict=True))
        epoch = int(values["epoch"]) + 1  # CSVLogger counts from 0, file names from 1
        (row,) = [r for p, r in rows.items() if p.startswith(f"demo/model.{epoch:02d}-")]
        assert row["epoch"] == epoch
        assert row["metrics"]["val_loss"] == pytest.approx(float(values["val_loss"]))
        assert row["optimizer"] == "Adam" and row["optimizer_bytes"] > 0
    # last.keras is rewritten every epoch: one catalog row, one generation per version.
    last = ws.json("show", str(ws.root / "demo" / "last.keras"))
    daemon.wait_until(
        lambda: ws.json("show", str(ws.root / "demo/last.keras"))["generation"] == epochs,
        10,
        "a generation per epoch of last.keras",
    )
    assert last["status"] == "ok"
    assert daemon.stop() == 0


def test_half_written_file_is_never_listed_before_it_is_complete(
    daemon_ws: Any, keras_checkpoints: Path
) -> None:
    ws, daemon = daemon_ws
    target = ws.root / "slow" / "weights.01-1.69.hdf5"
    target.parent.mkdir()
    done = ws.root.parent / "writer-done"  # outside the root: the daemon never sees it
    go = ws.root.parent / "writer-go"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import os, sys, time\n"
                "data = open(sys.argv[1], 'rb').read()\n"
                "with open(sys.argv[2], 'wb') as f:\n"
                "    f.write(data[: len(data) // 2]); f.flush()\n"
                "    deadline = time.monotonic() + 120\n"
                "    while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:\n"
                "        time.sleep(0.05)\n"
                "    f.write(data[len(data) // 2 :])\n"
                "open(sys.argv[3], 'w').close()\n"
            ),
            str(keras_checkpoints / H5_CKPT),
            str(target),
            str(done),
            str(go),
        ]
    )
    # The file stays half written until the test says go: for longer than settle_seconds (1 s)
    # and until two listings have returned meanwhile, however slow the CLI is on a loaded
    # machine. Judged only by listings that *returned* before the second half was written.
    half_written_since = time.monotonic()
    seen: list[str | None] = []
    while writer.poll() is None and not done.exists():
        row = listed(ws).get("slow/weights.01-1.69.hdf5")
        if go.exists():
            break
        seen.append(row["status"] if row else None)
        assert row is None or row["status"] != "ok", row
        if len(seen) >= 2 and time.monotonic() - half_written_since > 3.5:
            go.touch()
        time.sleep(0.2)
    assert writer.wait(150) == 0
    assert seen, "no listing returned while the file was half written"
    daemon.wait_until(
        lambda: listed(ws).get("slow/weights.01-1.69.hdf5", {}).get("status") == "ok",
        15,
        "the finished file",
    )
    assert set(seen) <= {None, "incomplete"}


def test_garbage_files_leave_the_daemon_running(daemon_ws: Any, keras_checkpoints: Path) -> None:
    ws, daemon = daemon_ws
    junk = ws.root / "junk"
    junk.mkdir()
    (junk / "empty.h5").write_bytes(b"")
    (junk / "random.keras").write_bytes(os.urandom(4096))
    (junk / "half.h5").write_bytes((keras_checkpoints / H5_CKPT).read_bytes()[:5000])
    (junk / "loop").symlink_to(junk, target_is_directory=True)
    shutil.copy(keras_checkpoints / ZIP_CKPT, junk / "good.keras")
    daemon.wait_until(
        lambda: (
            len(listed(ws)) == 4 and all(r["status"] != "incomplete" for r in listed(ws).values())
        ),
        20,
        "four verdicts",
    )
    rows = listed(ws)
    assert rows["junk/good.keras"]["status"] == "ok"
    for name in ("empty.h5", "random.keras", "half.h5"):
        assert rows[f"junk/{name}"]["status"] == "corrupt" and rows[f"junk/{name}"]["reason"]
    assert daemon.proc.poll() is None


def test_kill_9_then_changes_then_restart_reconciles(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = service_workspace(tmp_path)
    for name in ("a", "b"):
        shutil.copy(keras_checkpoints / H5_CKPT, ws.root / f"{name}.h5")
    first = Daemon(ws)
    first.wait_for_log("event=ready")
    first.wait_until(lambda: len(listed(ws)) == 2, 20, "two rows")
    first.signal(signal.SIGKILL)
    first.wait()
    assert not ws.json("status")["running"] and "not running" in ws.json("status")["reason"]
    (ws.root / "a.h5").unlink()
    shutil.copy(keras_checkpoints / ZIP_CKPT, ws.root / "c.keras")
    leftover = ws.root / ".ckpt-tmp-999999-abc-b.h5"  # what a crash mid-rewrite leaves
    leftover.write_bytes(b"partial")
    second = Daemon(ws)
    second.wait_for_log("event=ready")
    rows = listed(ws)
    assert rows["a.h5"]["status"] == "missing"
    assert rows["b.h5"]["status"] == "ok" and rows["c.keras"]["status"] == "ok"
    assert not leftover.exists()
    assert "event=removed_temp" in second.log
    assert ws.json("status")["running"]
    assert second.stop() == 0
    status = ws.json("status")
    assert not status["running"] and status["reason"].startswith("stopped at")


def test_sighup_reloads_a_valid_config_and_keeps_the_old_on_an_invalid_one(
    daemon_ws: Any, keras_checkpoints: Path
) -> None:
    ws, daemon = daemon_ws
    second_root = ws.base / "more"
    second_root.mkdir()
    good = ws.config.read_text()
    ws.config.write_text(good.replace("roots:\n", f"roots:\n  - path: {second_root}\n", 1))
    daemon.signal(signal.SIGHUP)
    daemon.wait_for_log("event=reloaded")
    shutil.copy(keras_checkpoints / ZIP_CKPT, second_root / "new.keras")
    daemon.wait_until(
        lambda: any(r["path"] == str(second_root / "new.keras") for r in ws.json("list")),
        20,
        "a file in the new root",
    )

    ws.config.write_text(good + "\nbogus_key: 1\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_for_log("event=reload_refused")
    assert "bogus_key" in daemon.log
    shutil.copy(keras_checkpoints / ZIP_CKPT, second_root / "after.keras")  # old config kept
    daemon.wait_until(
        lambda: str(second_root / "after.keras") in catalog_paths(ws),
        20,
        "indexing to go on with the old config",
    )

    # A root that does not exist is refused as `config check` refuses it: the old one kept.
    ws.config.write_text(good.replace("roots:\n", f"roots:\n  - path: {ws.base}/nowhere\n", 1))
    daemon.signal(signal.SIGHUP)
    daemon.wait_until(lambda: daemon.log.count("event=reload_refused") == 2, 30, "a refusal")
    assert f"roots[0].path: {ws.base}/nowhere does not exist" in daemon.log
    shutil.copy(keras_checkpoints / ZIP_CKPT, second_root / "later.keras")
    daemon.wait_until(
        lambda: str(second_root / "later.keras") in catalog_paths(ws), 30, "the old config kept"
    )
    assert daemon.stop() == 0


def test_sigterm_during_work_exits_0_and_loses_nothing(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    for i in range(40):
        shutil.copy(keras_checkpoints / ZIP_CKPT, ws.root / f"m{i:02d}.keras")
    daemon.wait_until(lambda: "event=indexed" in daemon.log, 20, "indexing to start")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    rows = listed(ws)
    assert all(r["status"] == "ok" for r in rows.values())  # no half-recorded rows
    report = ws.json("scan")  # what the daemon did not reach is simply still to do
    assert len(report["indexed"]) + len(rows) == 40 and not report["failed"]


def test_plays_systemd_notify_socket(tmp_path: Path, keras_checkpoints: Path) -> None:
    ws = service_workspace(tmp_path)
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.2)
    messages: list[str] = []

    def drain(until: str, timeout: float = 30) -> None:
        """Receive until a new datagram contains `until`."""
        start = len(messages)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                messages.append(sock.recv(4096).decode())
            if any(until in m for m in messages[start:]):
                return
        raise AssertionError(f"no {until!r} in {messages[start:]}")

    daemon = Daemon(ws, env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "1000000"})
    try:
        drain("READY=1")
        ready = next(m for m in messages if "READY=1" in m)
        assert "STATUS=" in ready
        drain("WATCHDOG=1", timeout=3)  # WATCHDOG_USEC=1 s: a ping every half second
        drain("WATCHDOG=1", timeout=3)
        daemon.signal(signal.SIGHUP)
        drain("RELOADING=1")
        drain("READY=1")  # after the reload
        daemon.signal(signal.SIGTERM)
        drain("STOPPING=1")
        assert daemon.wait() == 0
    finally:
        sock.close()
        if daemon.proc.poll() is None:
            daemon.proc.kill()


def test_serve_once_reconciles_and_exits(tmp_path: Path, keras_checkpoints: Path) -> None:
    ws = service_workspace(tmp_path)
    shutil.copy(keras_checkpoints / ZIP_CKPT, ws.root / "a.keras")
    broken = ws.root / "broken.h5"
    broken.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    an_hour_ago = time.time() - 3600
    os.utime(broken, (an_hour_ago, an_hour_ago))  # settled: broken, not being written
    result = ws.run("serve", "--once", check=False)
    assert result.returncode == 3, result.stderr  # one checkpoint failed
    # `ckpt status` says what ran (not "no daemon has run"), and how it ended.
    status = ws.json("status")
    assert status["running"] is False, status
    assert status["reason"].startswith("no daemon running: `serve --once` last ran, until 20")
    assert "broken.h5" in status["last_error"], status
    text = ws.run("status").stdout.splitlines()[0]
    assert text.startswith("not running: no daemon running: `serve --once` last ran"), text
    rows = listed(ws)
    assert rows["a.keras"]["status"] == "ok" and rows["broken.h5"]["status"] == "corrupt"
    # With a policy configured, --once also applies it (cron users get retention too).
    shutil.copy2(keras_checkpoints / "k3/run_zip/e02-vl1.663.keras", ws.root / "b.keras")
    os.utime(ws.root / "a.keras", (an_hour_ago, an_hour_ago))
    os.utime(ws.root / "b.keras")  # the newest
    ws.config.write_text(ws.config.read_text() + "retention: {keep_last: 1}\n")
    ws.run("serve", "--once", check=False)
    rows = listed(ws)
    assert rows["a.keras"]["status"] == "trashed" and rows["b.keras"]["status"] == "ok"
    assert len(ws.json("status")["daemons"]) == 1  # each --once replaces the last one's row
    assert len(catalog_rows(ws, "SELECT id FROM heartbeat")) == 1


def test_status_when_no_daemon_ever_ran(workspace: Workspace) -> None:
    catalog = workspace.base / "state" / "catalog.db"
    none = workspace.json("status")  # no catalog yet: said, and none created
    assert none["running"] is False and none["reason"].startswith(f"no catalog at {catalog}")
    assert not catalog.exists()
    workspace.run("scan")
    doc = workspace.json("status")
    assert doc["running"] is False and doc["reason"] == "no daemon has run against this catalog"
    assert {
        "running",
        "pid",
        "started_at",
        "heartbeat_at",
        "roots",
        "checkpoints",
        "queue",
        "last_error",
    } <= set(doc)
    assert json.dumps(doc)


def test_bad_config_is_refused_at_start_with_exit_2(tmp_path: Path) -> None:
    ws = service_workspace(tmp_path, extra="schedule_typo: 1\n")
    result = ws.run("serve", check=False)
    assert result.returncode == 2
    assert "schedule_typo" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_service_applies_configured_retention_on_schedule(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = service_workspace(tmp_path, extra="retention: {keep_last: 1}\n")
    ws.config.write_text(
        ws.config.read_text().replace(
            "schedule:\n  rescan: 0\n", "schedule:\n  rescan: 0\n  retention: 1s\n  purge: 0\n"
        )
    )
    run = ws.root / "k3" / "run_zip"
    run.mkdir(parents=True)
    for name in ("e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"):
        shutil.copy2(keras_checkpoints / "k3" / "run_zip" / name, run / name)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    daemon.wait_until(
        lambda: sorted(r["status"] for r in listed(ws).values()) == ["ok", "trashed", "trashed"],
        30,
        "the retention job",
    )
    assert listed(ws)["k3/run_zip/e03-vl1.643.keras"]["status"] == "ok"
    events = [e for e in ws.json("log") if e["action"] == "trash"]
    assert len(events) == 2 and all(e["actor"].startswith("daemon:") for e in events)
    assert daemon.stop() == 0


def test_the_service_splits_and_compresses_cold_checkpoints(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = service_workspace(tmp_path, extra="artifacts: {split_after: 1s, compress_after: 1s}\n")
    ws.config.write_text(
        ws.config.read_text().replace(
            "schedule:\n  rescan: 0\n", "schedule:\n  rescan: 0\n  artifacts: 1s\n  verify: 0\n"
        )
    )
    run = ws.root / "exp"
    run.mkdir()
    shutil.copy2(keras_checkpoints / ZIP_CKPT, run / "e01-vl1.683.keras")
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")

    def done() -> bool:
        shown = ws.json("show", str(run / "e01-vl1.683.keras"))
        kinds = {a["kind"] for a in shown["artifacts"]}
        return kinds == {"inference", "card", "compressed"}  # the split writes its card

    daemon.wait_until(done, 60, "an inference artifact and a compressed checkpoint")
    assert (run / "e01-vl1.683.inference.keras").exists()
    assert len(listed(ws)) == 1  # the artifact is never indexed as a checkpoint
    actors = {e["actor"] for e in ws.json("log") if e["action"] in ("split", "compress")}
    assert actors and all(a.startswith("daemon:") for a in actors)
    assert daemon.stop() == 0
