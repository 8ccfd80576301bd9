"""The `ckpt` command's contract, run as users run it: subprocesses, a real catalog, real files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace
from tests.support.forked_cli import ckpt_process

pytestmark = pytest.mark.slow

LIST_FIELDS = {
    "id",
    "path",
    "run",
    "format",
    "kind",
    "epoch",
    "step",
    "size_bytes",
    "weights_bytes",
    "optimizer_bytes",
    "optimizer",
    "n_params",
    "status",
    "pinned",
    "mtime",
    "indexed_at",
    "hash",
    "metrics",
}
SHOW_FIELDS = {
    "layers",
    "optimizer_config",
    "training_config",
    "keras_version",
    "backend",
    "artifacts",
    "events",
}


def by_relpath(ws: Workspace, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in rows}


def test_scan_indexes_every_generated_checkpoint(
    scanned: Workspace, manifest: dict[str, Any]
) -> None:
    rows = by_relpath(scanned, scanned.json("list"))
    assert set(rows) == set(manifest)
    for rel, truth in manifest.items():
        row = rows[rel]
        assert set(row) >= LIST_FIELDS, rel
        assert row["status"] == "ok", (rel, row["reason"])
        assert row["format"] == truth["format"], rel
        assert row["n_params"] == truth["n_params"], rel
        assert row["hash"].startswith("blake3:"), rel


def test_metrics_join_csv_epochs_to_file_epochs(
    scanned: Workspace, manifest: dict[str, Any]
) -> None:
    rows = by_relpath(scanned, scanned.json("list"))
    joined = 0
    for rel, truth in manifest.items():
        if truth["epoch"] is None:
            continue
        assert rows[rel]["epoch"] == truth["epoch"], rel
        for name, value in truth["metrics"].items():
            # CSVLogger values are float32 printed in full: equal to the live logs.
            assert rows[rel]["metrics"][name] == pytest.approx(value, rel=1e-6), (rel, name)
            joined += 1
    assert joined >= 20


def test_best_prints_the_path_alone(scanned: Workspace, manifest: dict[str, Any]) -> None:
    candidates = {
        rel: t["metrics"]["val_loss"] for rel, t in manifest.items() if "val_loss" in t["metrics"]
    }
    expected = min(candidates, key=lambda rel: candidates[rel])
    out = scanned.run("best", "--metric", "val_loss").stdout
    assert out == f"{scanned.root / expected}\n"
    best_acc = max(
        (t["metrics"]["val_accuracy"], rel)
        for rel, t in manifest.items()
        if "val_accuracy" in t["metrics"]
    )
    doc = scanned.json("best", "--metric", "val_accuracy")  # max by default: an accuracy
    assert doc["metrics"]["val_accuracy"] == pytest.approx(best_acc[0])


def test_best_within_a_run_and_min_max(scanned: Workspace, manifest: dict[str, Any]) -> None:
    run = "k3/run_zip"
    losses = {
        rel: t["metrics"]["loss"]
        for rel, t in manifest.items()
        if rel.startswith(run + "/") and t["metrics"]
    }
    lowest = scanned.run("best", "--metric", "loss", "--run", run).stdout.strip()
    highest = scanned.run("best", "--metric", "loss", "--run", run, "--mode", "max").stdout
    assert lowest == str(scanned.root / min(losses, key=lambda r: losses[r]))
    assert highest.strip() == str(scanned.root / max(losses, key=lambda r: losses[r]))


def test_list_filters_sort_and_limit(scanned: Workspace, manifest: dict[str, Any]) -> None:
    rows = scanned.json("list", "--where", "val_loss < 1.66", "--sort", "val_loss")
    expected = sorted(
        (t["metrics"]["val_loss"], rel)
        for rel, t in manifest.items()
        if t["metrics"].get("val_loss", 99) < 1.66
    )
    assert [str(Path(r["path"]).relative_to(scanned.root)) for r in rows] == [
        rel for _v, rel in expected
    ]
    assert len(scanned.json("list", "--run", "k3/run_zip", "--limit", "2")) == 2
    zips = scanned.json("list", "--format", "keras-v3-zip")
    assert {r["format"] for r in zips} == {"keras-v3-zip"} and len(zips) == 4
    epochs = [
        r["epoch"] for r in scanned.json("list", "--run", "k3/run_zip", "--sort", "epoch", "--desc")
    ]
    assert epochs == [3, 2, 1]
    big = scanned.json("list", "--where", "size > 100kB")
    assert big and all(r["size_bytes"] > 100_000 for r in big)


def test_show_has_layers_configs_and_events(scanned: Workspace) -> None:
    doc = scanned.json("show", str(scanned.root / "k3/run_zip/e02-vl1.663.keras"))
    assert set(doc) >= SHOW_FIELDS
    assert [layer["name"] for layer in doc["layers"]] == ["x", "fc1", "bn", "act", "head"]
    assert doc["optimizer_config"]["learning_rate"] == 2**-9
    assert doc["iterations"] == 6 and doc["keras_version"].startswith("3.")
    assert [e["action"] for e in doc["events"]] == ["indexed"]
    by_id = scanned.json("show", str(doc["id"]))
    assert by_id["path"] == doc["path"]
    text = scanned.run("show", str(doc["id"])).stdout
    assert "resume: yes" in text and "fc1" in text


def test_runs(scanned: Workspace, manifest: dict[str, Any]) -> None:
    runs = {r["name"]: r for r in scanned.json("runs")}
    assert runs["k3/run_zip"]["checkpoints"] == 3
    assert runs["k3/run_zip"]["newest"].endswith("e03-vl1.643.keras")
    zip_losses = {
        rel: t["metrics"]["val_loss"]
        for rel, t in manifest.items()
        if rel.startswith("k3/run_zip/")
    }
    assert runs["k3/run_zip"]["best"]["val_loss"] == str(
        scanned.root / min(zip_losses, key=lambda r: zip_losses[r])
    )
    assert {"name", "root", "checkpoints", "bytes", "newest", "best"} <= set(runs["tfk"])


def test_exit_codes(scanned: Workspace) -> None:
    assert scanned.run("show", "999999", check=False).returncode == 6
    # a metric no checkpoint has is a typo (exit 2); one no checkpoint of the run has, not found
    assert scanned.run("best", "--metric", "no_such_metric", check=False).returncode == 2
    assert scanned.run("best", "--metric", "val_loss", "--run", "nope", check=False).returncode == 6
    bad = scanned.run("list", "--where", "val_loss <<< 3", check=False)
    assert bad.returncode == 2 and "--where" in bad.stderr
    assert scanned.run("frobnicate", check=False).returncode == 2
    outside = scanned.run("scan", "/", check=False)
    assert outside.returncode == 2 and "not inside a configured root" in outside.stderr


def test_catalog_behind_head_is_refused_with_exit_5(workspace: Workspace) -> None:
    workspace.run("scan")  # creates the catalog at head
    db = workspace.base / "state" / "catalog.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0000'")
    result = workspace.run("list", check=False)
    assert result.returncode == 5 and "ckpt db upgrade" in result.stderr
    assert "0000 (needs" in workspace.run("db", "current").stdout


def test_db_commands(workspace: Workspace) -> None:
    assert workspace.run("db", "current").stdout.startswith("empty")
    assert "catalog schema at" in workspace.run("db", "upgrade").stdout
    assert "(head)" in workspace.run("db", "current").stdout


def test_list_does_not_import_h5py_or_tensorflow(scanned: Workspace) -> None:
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('LOADED=' + ','.join(sorted(m for m in "
        "('h5py', 'tensorflow', 'keras', 'numpy') if m in sys.modules)) + '\\n'))\n"
        "from ckpt_daemon.cli.main import main\n"
        f"main(['--config', {str(scanned.config)!r}, 'list', '--json'])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "LOADED=\n" in result.stderr
    assert json.loads(result.stdout)


def test_best_starts_without_what_only_writers_need(scanned: Workspace) -> None:
    """`ckpt best` only reads the catalog and stats the file: it imports none of what temp
    names, renameat2 and CSV logs need (OpenSSL's hashlib, socket, ctypes, csv), each a few ms
    of every start (README: Performance). Compared with what `python -c pass` loads here."""
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('LOADED=' + json.dumps(sorted(sys.modules)) "
        "+ '\\n'))\n"
    )
    best = probe + (
        "from ckpt_daemon.cli.main import main\n"
        f"main(['--config', {str(scanned.config)!r}, 'best', '--metric', 'val_loss'])\n"
    )

    def loaded(script: str) -> set[str]:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        line = [x for x in done.stderr.splitlines() if x.startswith("LOADED=")]
        assert line, done.stderr
        return set(json.loads(line[-1][len("LOADED=") :]))

    extra = loaded(best) - loaded(probe)
    assert "ckpt_daemon.cli.main" in extra
    assert extra & {"_hashlib", "hashlib", "socket", "ctypes", "csv", "secrets"} == set()


def test_every_command_has_help_with_an_example() -> None:
    from ckpt_daemon.cli.main import all_commands

    for name, cmd in all_commands():
        result = ckpt_process([*name.split(), "--help"], timeout=120)
        assert result.returncode == 0, name
        if not hasattr(cmd, "commands"):
            assert "Example" in result.stdout, name
