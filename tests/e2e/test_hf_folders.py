"""Folder checkpoints (fs.folder_layouts) on real Hugging Face folders (tests/support/hf_runs.py):
one catalog entry per folder with its files as members (`verify --load` loads its weight files
with torch's weights_only in a child), completeness judged as a whole (a
missing or short shard: `incomplete` while young, `corrupt` naming it once settled), a folder
moved to the trash and back as one unit with its own mtime untouched (the Trainer's rotation
reads it), and a live daemon that indexes a folder whose first files came before its watch.
torch and transformers are never imported by the test process."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.support import Daemon, Workspace, service_workspace
from tests.support.hf_runs import load_truth


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    return dst


def _fresh_copy(src: Path, dst: Path) -> Path:
    """A copy whose files were just written (the session's fixtures may be older than any
    settle time): what a trainer's folder looks like while it is still young."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    return dst


def _rows(ws: Workspace, *args: str) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all", *args)}


def _with_all(ws: Workspace, hf: Path) -> None:
    _copy(hf / "trainer" / "out", ws.root / "hf" / "out")
    for name in ("pretrained", "sharded", "sharded-bin"):
        _copy(hf / name / "tiny", ws.root / name / "tiny")


def test_each_folder_is_one_checkpoint_with_its_files(workspace: Workspace, hf_runs: Path) -> None:
    ws, truth = workspace, load_truth(hf_runs)
    _with_all(ws, hf_runs)
    report = ws.json("scan")
    rows = _rows(ws)
    trainer = truth["trainer"]["folders"]
    expected = {f"hf/out/{n}" for n in trainer} | {f"{n}/tiny" for n in ("pretrained", "sharded")}
    assert set(rows) == expected | {"sharded-bin/tiny"}, (rows.keys(), report)
    for path, row in rows.items():
        assert row["status"] == "ok" and row["format"] == "hf-folder", row
        folder = ws.root / path
        shown = ws.json("show", str(row["id"]))
        names = sorted(Path(f).name for f in shown["files"])
        assert names == sorted(p.name for p in folder.iterdir()), shown["files"]
        assert row["size_bytes"] == sum(p.stat().st_size for p in folder.iterdir())
        part = trainer.get(folder.name) or truth[path.split("/")[0]]
        assert (row["n_params"], row["weights_bytes"]) == (part["n_params"], part["bytes"])
    for name, t in trainer.items():
        row = rows[f"hf/out/{name}"]
        assert row["step"] == t["global_step"] and row["kind"] == "full", row
        assert row["optimizer"] == "AdamW"
        for metric in ("eval_loss", "eval_accuracy", "loss", "learning_rate"):
            assert abs(row["metrics"][metric] - t["metrics"][metric]) < 1e-9, (metric, row)
    for name in ("pretrained", "sharded", "sharded-bin"):
        assert rows[f"{name}/tiny"]["kind"] == "weights"
    # verify --load: every `.bin` shard through torch.load(weights_only=True), in a torch child
    verdicts = ws.json("verify", "--load", str(rows["sharded-bin/tiny"]["id"]))
    loaded = [v for v in verdicts if "loads with torch" in v["detail"]]
    assert len(loaded) == 1 and all(v["ok"] for v in verdicts), verdicts
    assert f"({truth['sharded-bin']['n_tensors']} tensors" in loaded[0]["detail"], loaded
    assert "torch" not in sys.modules and "transformers" not in sys.modules


def _shard(folder: Path, k: int) -> Path:
    return next(folder.glob(f"*-0000{k}-of-*"))


def test_a_missing_or_short_shard_is_incomplete_while_young_then_corrupt_naming_it(
    tmp_path: Path, hf_runs: Path
) -> None:
    young = Workspace(tmp_path / "young", settle_seconds=3600)
    for ws in [young]:
        _fresh_copy(hf_runs / "sharded" / "tiny", ws.root / "gone" / "tiny")
        _fresh_copy(hf_runs / "sharded-bin" / "tiny", ws.root / "short" / "tiny")
        _fresh_copy(hf_runs / "trainer" / "out" / "checkpoint-4", ws.root / "cut" / "checkpoint-4")
        gone = _shard(ws.root / "gone" / "tiny", 2)
        gone.unlink()
        short = _shard(ws.root / "short" / "tiny", 1)
        os.truncate(short, short.stat().st_size - 100)
        (ws.root / "cut" / "checkpoint-4" / "trainer_state.json").unlink()
    young.run("scan", check=False)
    rows = _rows(young)
    assert {r["status"] for r in rows.values()} == {"incomplete"}, rows
    assert gone.name in rows["gone/tiny"]["reason"]
    assert short.name in rows["short/tiny"]["reason"]
    assert "trainer_state.json" in rows["cut/checkpoint-4"]["reason"]

    settled = young.config.read_text().replace("settle_seconds: 3600", "settle_seconds: 0")
    young.config.write_text(settled)
    assert young.run("scan", check=False).returncode == 3  # some checkpoints are corrupt
    rows = _rows(young)
    assert {r["status"] for r in rows.values()} == {"corrupt"}, rows
    assert f"shard {gone.name}" in rows["gone/tiny"]["reason"], rows["gone/tiny"]
    assert "missing" in rows["gone/tiny"]["reason"]
    assert short.name in rows["short/tiny"]["reason"]
    assert len(rows) == 3  # the folders, never their files one by one


def test_trash_restore_and_purge_move_a_folder_whole_and_never_touch_its_mtime(
    workspace: Workspace, hf_runs: Path
) -> None:
    ws = workspace
    run = ws.root / "hf" / "pre"
    _copy(hf_runs / "pretrained" / "tiny", run / "a")
    _copy(hf_runs / "pretrained" / "tiny", run / "b")
    os.utime(run / "a", ns=(10**18, 10**18))  # "a" is the older checkpoint of the run
    for f in (run / "a").iterdir():
        os.utime(f, ns=(10**18, 10**18))
    folder_mtime = (run / "a").stat().st_mtime_ns
    ws.run("scan")
    ids = {Path(r["path"]).name: r["id"] for r in ws.json("list")}
    ws.run("prune", "--run", "hf/pre", "--keep-last", "1")
    assert not (run / "a").exists() and (run / "b").is_dir()
    [trashed] = ws.json("trash", "list")
    moved = Path(trashed["trash_paths"][0]) if "trash_paths" in trashed else None
    found = [p for p in (ws.root / ".ckpt-trash").rglob("a") if p.is_dir()]
    assert len(found) == 1 and sorted(x.name for x in found[0].iterdir()) == sorted(
        x.name for x in (run / "b").iterdir()
    ), (found, moved)
    assert found[0].stat().st_mtime_ns == folder_mtime  # renamed whole: its mtime is its own
    ws.run("trash", "restore", str(ids["a"]))
    assert (run / "a").stat().st_mtime_ns == folder_mtime
    assert _rows(ws)["hf/pre/a"]["status"] == "ok"
    ws.run("prune", "--run", "hf/pre", "--keep-last", "1")
    ws.run("trash", "purge", "--older-than", "0s")
    assert not (run / "a").exists() and not any((ws.root / ".ckpt-trash").rglob("a"))
    assert _rows(ws)["hf/pre/a"]["status"] == "purged"
    assert (run / "b" / "model.safetensors").is_file()


def test_a_live_daemon_indexes_a_new_folder_whose_files_came_before_its_watch(
    tmp_path: Path, hf_runs: Path
) -> None:
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    source = hf_runs / "trainer" / "out" / "checkpoint-4"
    out = ws.root / "live" / "out"
    out.mkdir(parents=True)
    # As the Trainer writes: the folder, then every file in place, trainer_state.json last.
    staging = tmp_path / "staging"
    _copy(source, staging)
    target = out / "checkpoint-4"
    target.mkdir()
    for name in sorted(p.name for p in staging.iterdir() if p.name != "trainer_state.json"):
        shutil.copy2(staging / name, target / name)
    shutil.copy2(staging / "trainer_state.json", target / "trainer_state.json")
    _copy(source, out / "checkpoint-6")  # a whole folder at once: no watch saw its files

    def indexed() -> bool:
        rows = _rows(ws)
        return all(
            rows.get(f"live/out/{n}", {}).get("status") == "ok"
            for n in ("checkpoint-4", "checkpoint-6")
        )

    daemon.wait_until(indexed, 120, "both folders indexed ok")
    rows = _rows(ws)
    assert set(rows) == {"live/out/checkpoint-4", "live/out/checkpoint-6"}, rows
    assert daemon.stop() == 0, daemon.log


def test_best_by_eval_loss_and_latest_resumable_falls_back_past_broken_folders(
    workspace: Workspace, hf_runs: Path
) -> None:
    ws, truth = workspace, load_truth(hf_runs)["trainer"]["folders"]
    out = _copy(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    _copy(out / "checkpoint-6", out / "checkpoint-8")  # newest, then broken two ways:
    (out / "checkpoint-8" / "optimizer.pt").unlink()  # not resumable (weights only)
    _copy(out / "checkpoint-6", out / "checkpoint-10")
    weights = out / "checkpoint-10" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 8)  # corrupt once settled
    ws.run("scan", check=False)
    rows = _rows(ws)
    assert rows["hf/out/checkpoint-10"]["status"] == "corrupt"
    assert "model.safetensors" in rows["hf/out/checkpoint-10"]["reason"]
    assert rows["hf/out/checkpoint-8"]["kind"] == "weights"
    resume = ws.json("latest", "--resumable", "--run", "hf/out")
    assert Path(resume["path"]).name == "checkpoint-6" and resume["resumable"] is True, resume
    assert "resume_from_checkpoint" in resume["resume_reason"]
    best = ws.json("best", "--metric", "eval_loss", "--run", "hf/out")
    lowest = min(truth.values(), key=lambda t: t["metrics"]["eval_loss"])
    assert abs(best["metrics"]["eval_loss"] - lowest["metrics"]["eval_loss"]) < 1e-12, best
    shown = ws.json("show", str(rows["hf/out/checkpoint-4"]["id"]))
    state = shown["training_config"]["trainer_state"]
    assert state["best_model_checkpoint"] == truth["checkpoint-4"]["best_model_checkpoint"]
    assert state["global_step"] == 4 and state["epoch"] == truth["checkpoint-4"]["epoch"]
    assert shown["training_config"]["config"]["model_type"] == "bert"
    card = ws.run("describe", str(rows["hf/out/checkpoint-4"]["id"])).stdout
    load = "transformers.BertForSequenceClassification.from_pretrained"  # config's class
    assert load in card and "resume_from_checkpoint" in card, card
    refused = ws.run("compress", str(rows["hf/out/checkpoint-4"]["id"]), check=False)
    assert refused.returncode == 2 and "Hugging Face folder" in refused.stderr, refused
    refused = ws.run("split", str(rows["hf/out/checkpoint-8"]["id"]), check=False)
    assert refused.returncode == 2 and "no optimizer state" in refused.stderr, refused
    assert shown["training_config"]["config"]["architectures"] == ["BertForSequenceClassification"]
