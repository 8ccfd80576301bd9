"""The torch family through the real CLI and the real daemon: `scan`, `list`, `show`, `best`,
`latest --resumable` on files real torch and Lightning wrote (tests/support/torch_runs.py), and a
live Lightning run into a watched root (Lightning moves each file in from the system temp dir:
the daemon sees a move, never a write-close). torch is never imported by the test process."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.support import Daemon, Workspace, service_workspace
from tests.support.torch_runs import (
    GENERATE_TIMEOUT_S,
    LIGHTNING_TRUTH,
    PLAIN_TRUTH,
    close,
    generate,
    load_truth,
    split_check,
)


def _root_with(ws: Workspace, torch_files: Path) -> None:
    shutil.copytree(torch_files / "plain", ws.root / "plain")
    shutil.copytree(torch_files / "pl" / "ckpts", ws.root / "pl" / "ckpts")


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list")}


def test_scan_list_show_best_latest_on_torch_files(workspace: Workspace, torch_files: Path) -> None:
    ws = workspace
    _root_with(ws, torch_files)
    report = ws.json("scan")
    plain = load_truth(torch_files / PLAIN_TRUTH)
    lightning = load_truth(torch_files / "pl" / LIGHTNING_TRUTH)
    assert len(report["indexed"]) == len(plain) + len(lightning["files"]), report
    rows = _rows(ws)
    for name, truth in [*plain.items(), *lightning["files"].items()]:
        row = rows[name]
        assert row["status"] == "ok", row
        assert row["format"] == truth["format"]
        assert row["n_params"] == truth["n_params"]
        assert row["weights_bytes"] == truth["bytes"]
        optimizer = truth.get("optimizer")
        assert row["optimizer"] == (optimizer["class"] if optimizer else None)
        assert row["optimizer_bytes"] == (optimizer["state_bytes"] if optimizer else 0)
    full = plain["full.pt"]
    assert (rows["full.pt"]["epoch"], rows["full.pt"]["step"]) == (full["epoch"], full["step"])
    for metric, value in full["metrics"].items():
        assert close(rows["full.pt"]["metrics"][metric], value)
    for name, truth in lightning["files"].items():
        row = rows[name]
        assert (row["epoch"], row["step"]) == (truth["epoch"], truth["step"])
        assert close(row["metrics"]["val_loss"], lightning["logged_val_loss"][str(truth["epoch"])])

    shown = ws.json("show", str(rows["full.pt"]["id"]))
    assert shown["kind"] == "full"
    assert shown["learning_rate"] == full["optimizer"]["param_groups"][0]["lr"]
    assert shown["iterations"] == full["optimizer"]["step"]
    assert shown["optimizer_config"]["param_groups"][0]["betas"] == [0.9, 0.999]
    assert shown["training_config"]["scheduler"]["type"] == "StepLR"
    layers = {w["name"]: w for layer in shown["layers"] for w in layer["weights"]}
    assert {k: [w["dtype"], w["shape"]] for k, w in layers.items()} == full["tensors"]

    best = ws.json("best", "--metric", "val_loss", "--run", "pl/ckpts")
    lowest = min(lightning["logged_val_loss"].values())
    assert close(best["metrics"]["val_loss"], lowest), best
    assert Path(best["path"]).name in {
        "last.ckpt",
        *(n for n in lightning["files"] if "epoch=2" in n),
    }

    resume = ws.json("latest", "--resumable", "--run", "plain")
    assert Path(resume["path"]).name == "full.pt" and resume["resumable"] is True, resume
    resume = ws.json("latest", "--resumable", "--run", "pl/ckpts")
    assert resume["step"] == max(t["step"] for t in lightning["files"].values())
    assert "torch" not in sys.modules


def test_split_torch_files_into_safetensors_verified_by_torch_and_verify_load(
    workspace: Workspace, torch_files: Path
) -> None:
    """`.pt` and Lightning `.ckpt` -> `<stem>.inference.safetensors` written without torch
    (views, transposes, broadcasts, bf16/float8 copied in the tensor's own order), the
    original untouched; torch itself (in a child) finds the same tensors; `verify --load`
    loads both in its own child; what cannot be split or compressed is refused with why."""
    ws = workspace
    _root_with(ws, torch_files)
    ws.run("scan")
    rows = _rows(ws)
    sources = {
        "full.pt": ws.root / "plain" / "full.pt",
        "views_full.pt": ws.root / "plain" / "views_full.pt",
        "last.ckpt": ws.root / "pl" / "ckpts" / "last.ckpt",
    }
    before = {name: path.read_bytes() for name, path in sources.items()}
    pairs = []
    for name, path in sources.items():
        result = ws.json("split", str(rows[name]["id"]))
        artifact = Path(result["artifact"])
        assert artifact == path.with_name(path.stem + ".inference.safetensors"), result
        card = artifact.with_name(path.stem + ".inference.md").read_text()  # its model card
        assert f"load_state_dict(load_file({json.dumps(str(artifact))}))" in card, card
        pairs.append((path, artifact))
    assert {name: path.read_bytes() for name, path in sources.items()} == before
    checked = split_check(pairs)
    for name, found in checked.items():
        assert found["names_equal"] and found["differs"] == [], (name, found)
    plain = load_truth(torch_files / PLAIN_TRUTH)
    assert checked["views_full.pt"]["n_tensors"] == len(plain["views_full.pt"]["tensors"])

    ws.run("scan")  # the artifacts are ours, never new checkpoints of the run
    assert set(_rows(ws)) == set(rows)
    ids = [str(rows[n]["id"]) for n in ("full.pt", "last.ckpt")]
    verdicts = ws.json("verify", "--load", *ids)
    loads = [v for v in verdicts if "loads with torch" in v["detail"]]
    assert len(loads) == 2 and all(v["ok"] for v in verdicts), verdicts
    assert all("inference artifact holds identical tensors" in v["detail"] for v in loads)

    for verb, name, word in (
        ("split", "sd.pt", "no optimizer state"),
        ("split", "legacy.pth", "legacy"),
        ("compress", "full.pt", "no lossless"),
    ):
        result = ws.run(verb, str(rows[name]["id"]), check=False)
        assert result.returncode == 2 and word in result.stderr, (name, verb, result)
    assert "torch" not in sys.modules


def test_a_live_daemon_indexes_a_lightning_run_as_it_trains(tmp_path: Path) -> None:
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    run = ws.root / "live"
    run.mkdir()
    generate("lightning", run)  # a real Trainer with ModelCheckpoint, into the watched root
    truth = load_truth(run / LIGHTNING_TRUTH)

    def indexed() -> bool:
        rows = _rows(ws)
        return all(
            rows.get(name, {}).get("status") == "ok" and rows[name]["epoch"] == t["epoch"]
            for name, t in truth["files"].items()
        )

    daemon.wait_until(indexed, GENERATE_TIMEOUT_S, "every Lightning checkpoint indexed ok")
    rows = _rows(ws)
    for name, t in truth["files"].items():
        assert rows[name]["format"] == "lightning-ckpt"
        assert rows[name]["step"] == t["step"]
        assert close(rows[name]["metrics"]["val_loss"], t["current_score"])
    assert daemon.stop() == 0, daemon.log
