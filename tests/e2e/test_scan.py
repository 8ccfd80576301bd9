"""Scanning real folders: idempotence, changes, disappearances, and every kind of bad input."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.support import Workspace

pytestmark = pytest.mark.slow
ZIP_CKPT = "k3/run_zip/e01-vl1.683.keras"
H5_CKPT = "tfk/run_h5/weights.01-1.69.hdf5"


def copy_in(ws: Workspace, fixtures: Path, rel: str, dest: str | None = None) -> Path:
    target = ws.root / (dest or rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(fixtures / rel, target)
    return target


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list")}


def event_count(ws: Workspace) -> int:
    with sqlite3.connect(ws.base / "state" / "catalog.db") as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_rescan_reads_nothing_unchanged_and_tracks_changes(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    for rel in ("k3/run_zip/e01-vl1.683.keras", "k3/run_zip/e02-vl1.663.keras", H5_CKPT):
        copy_in(ws, keras_checkpoints, rel)
    first = ws.json("scan")
    assert len(first["indexed"]) == 3
    events = event_count(ws)
    second = ws.json("scan")
    assert second["indexed"] == [] and second["unchanged"] == 3
    assert event_count(ws) == events  # idempotent: nothing recorded twice

    # Rewritten in place (ModelCheckpoint with a fixed name): re-indexed as a new generation.
    target = ws.root / "k3/run_zip/e01-vl1.683.keras"
    shutil.copyfile(keras_checkpoints / "k3/run_zip/e03-vl1.643.keras", target)
    third = ws.json("scan")
    assert third["indexed"] == [str(target)]
    shown = ws.json("show", str(target))
    assert shown["generation"] == 2 and shown["iterations"] == 9  # the epoch-3 content
    assert [e["action"] for e in shown["events"]] == ["indexed", "indexed"]

    # Removed: marked missing, never dropped.
    (ws.root / H5_CKPT).unlink()
    fourth = ws.json("scan")
    assert fourth["missing"] == [str(ws.root / H5_CKPT)]
    gone = rows(ws)[H5_CKPT]
    assert gone["status"] == "missing" and gone["reason"] == "no longer on disk"
    assert ws.json("scan")["missing"] == []  # not reported twice


def test_metrics_written_after_the_checkpoint_are_picked_up(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """CSVLogger may write its row after ModelCheckpoint saved: an unchanged file's metrics
    are re-read when a metrics file changed, without re-reading the checkpoint."""
    ws = workspace
    copy_in(ws, keras_checkpoints, ZIP_CKPT)
    ws.run("scan")
    assert rows(ws)[ZIP_CKPT]["metrics"] == {"val_loss": pytest.approx(1.683)}  # from the name
    time.sleep(0.01)
    copy_in(ws, keras_checkpoints, "k3/run_zip/training.log")
    os.utime(ws.root / "k3/run_zip/training.log")
    report = ws.json("scan")
    assert report["indexed"] == [] and report["metrics_refreshed"] == 1
    metrics = rows(ws)[ZIP_CKPT]["metrics"]
    assert set(metrics) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert ws.json("show", str(ws.root / ZIP_CKPT))["metric_sources"]["loss"].startswith("csv:")


def test_bad_files_are_recorded_with_reasons_and_the_scan_goes_on(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    bad = ws.root / "bad"
    bad.mkdir()
    (bad / "empty.h5").write_bytes(b"")
    (bad / "random.keras").write_bytes(np.random.default_rng(0).bytes(5000))
    full = (keras_checkpoints / H5_CKPT).read_bytes()
    (bad / "truncated.h5").write_bytes(full[: len(full) // 2])
    archive = (keras_checkpoints / ZIP_CKPT).read_bytes()
    (bad / "truncated.keras").write_bytes(archive[: len(archive) - 100])
    with zipfile.ZipFile(bad / "notkeras.keras", "w") as z:
        z.writestr("readme.txt", "hello")
    with h5py.File(bad / "dataset.h5", "w") as f:
        f["images"] = np.zeros((4, 4))
    copy_in(ws, keras_checkpoints, ZIP_CKPT, "bad/renamed.h5")  # a .keras zip named .h5
    copy_in(ws, keras_checkpoints, H5_CKPT, "good/ok.hdf5")

    result = ws.run("scan", "--json", check=False)
    assert result.returncode == 3, result.stderr
    found = rows(ws)
    expect = {
        "bad/empty.h5": ("corrupt", "empty file"),
        "bad/random.keras": ("corrupt", "neither an HDF5 file nor a zip archive"),
        "bad/truncated.h5": ("corrupt", "truncated"),
        "bad/truncated.keras": ("corrupt", "zip"),
        "bad/notkeras.keras": ("corrupt", "not a Keras archive"),
    }
    for rel, (status, reason) in expect.items():
        assert found[rel]["status"] == status, (rel, found[rel])
        assert reason in found[rel]["reason"], (rel, found[rel]["reason"])
        assert "\n" not in found[rel]["reason"]
    assert "bad/dataset.h5" not in found  # not a checkpoint at all: skipped, not recorded
    assert found["bad/renamed.h5"]["status"] == "ok"
    assert found["bad/renamed.h5"]["format"] == "keras-v3-zip"  # by content, not extension
    assert found["good/ok.hdf5"]["status"] == "ok"
    assert ws.run("scan", check=False).returncode == 3  # still failing, still said


def test_recent_broken_file_is_incomplete_until_it_settles(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """A half-written file is `incomplete` while it may still be growing, `corrupt` after."""
    ws = Workspace(tmp_path, settle_seconds=3600)
    full = (keras_checkpoints / H5_CKPT).read_bytes()
    half = ws.root / "run" / "w.h5"
    half.parent.mkdir()
    half.write_bytes(full[: len(full) // 2])
    assert ws.run("scan", check=False).returncode == 0  # incomplete is not a failure
    row = rows(ws)["run/w.h5"]
    assert row["status"] == "incomplete" and "not settled" in row["reason"]
    half.write_bytes(full)  # the writer finishes
    ws.run("scan")
    assert rows(ws)["run/w.h5"]["status"] == "ok"


def test_file_being_rewritten_during_scans_is_never_ok(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = Workspace(workspace.base, settle_seconds=60)
    target = ws.root / "run" / "growing.h5"
    target.parent.mkdir()
    shutil.copyfile(keras_checkpoints / H5_CKPT, target)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "end = time.time() + 4\n"
                "while time.time() < end:\n"
                "    with open(sys.argv[1], 'ab') as f: f.write(b'x' * 4096)\n"
                "    time.sleep(0.01)\n"
            ),
            str(target),
        ]
    )
    try:
        for _ in range(3):
            ws.run("scan", check=False)
            assert rows(ws)["run/growing.h5"]["status"] == "incomplete"
    finally:
        writer.wait(timeout=30)


def test_links_loops_and_odd_names(
    workspace: Workspace, keras_checkpoints: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ws = workspace
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy2(keras_checkpoints / H5_CKPT, outside / "secret.h5")
    run = ws.root / "run"
    run.mkdir()
    (run / "loop").symlink_to(run, target_is_directory=True)
    (run / "escape.h5").symlink_to(outside / "secret.h5")
    (run / "outside_dir").symlink_to(outside, target_is_directory=True)
    odd = os.fsencode(run) + b"/caf\xe9.h5"  # latin-1 bytes: not valid UTF-8
    with open(odd, "wb") as f:
        f.write((keras_checkpoints / H5_CKPT).read_bytes())
    result = ws.run("scan", "--json", check=False)
    assert result.returncode == 3
    found = rows(ws)
    assert not any("secret" in p or "escape" in p or "loop" in p for p in found)
    (name,) = [p for p in found if p.startswith("run/caf")]
    assert found[name]["status"] == "unreadable" and "UTF-8" in found[name]["reason"]


def test_unreadable_file_is_recorded_as_unreadable(tmp_path: Path, keras_checkpoints: Path) -> None:
    ws = Workspace(tmp_path)
    copy_in(ws, keras_checkpoints, H5_CKPT, "run/locked.h5")
    (ws.root / "run/locked.h5").chmod(0o000)
    cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "scan", "--json"]
    if os.geteuid() == 0:
        # root reads anything: drop the capabilities that bypass file permissions.
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    row = rows(ws)["run/locked.h5"]
    assert row["status"] == "unreadable" and "permission denied" in row["reason"]


def test_unmounted_root_marks_nothing_missing(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    copy_in(ws, keras_checkpoints, H5_CKPT)
    ws.run("scan")
    moved = ws.base / "elsewhere"
    ws.root.rename(moved)
    result = ws.run("scan", "--json", check=False)
    assert result.returncode == 3 and "not a folder" in result.stdout
    moved.rename(ws.root)
    assert rows(ws)[H5_CKPT]["status"] == "ok"
