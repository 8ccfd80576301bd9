"""A torch-family trainer's own rotation is housekeeping (core.trainer_keeps): a `checkpoint-N/`
deleted while a newer `checkpoint-M/` is beside it (HF `save_total_limit`), a `.ckpt` the newest
Lightning file's `best_k_models` no longer lists (`save_top_k`) are `removed by trainer`, never
`missing`; what the trainer names as its best (HF `best_model_checkpoint`, Lightning
`best_k_models`) is protected by retention like our own best. Real files of real trainers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tests.support import Workspace
from tests.support.hf_runs import load_truth
from tests.support.torch_runs import LIGHTNING_TRUTH


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list", "--all")}


def test_hf_rotation_is_removed_by_trainer_and_a_deleted_newest_is_missing(
    workspace: Workspace, hf_runs: Path
) -> None:
    ws = workspace
    out = ws.root / "hf" / "out"
    shutil.copytree(hf_runs / "trainer" / "out", out, copy_function=shutil.copy2)
    # The folder the Trainer's rotation deleted in the real run (`rotated` in the truth).
    assert load_truth(hf_runs)["trainer"]["rotated"] == ["checkpoint-2"]
    shutil.copytree(out / "checkpoint-4", out / "checkpoint-2", copy_function=shutil.copy2)
    ws.run("scan")
    assert _rows(ws)["checkpoint-2"]["status"] == "ok"
    shutil.rmtree(out / "checkpoint-2")  # what save_total_limit does: rmtree of the oldest
    shutil.rmtree(out / "checkpoint-6")  # the newest, deleted by hand: an anomaly
    report = ws.json("scan")
    rows = _rows(ws)
    assert rows["checkpoint-2"]["status"] == "removed", rows["checkpoint-2"]
    assert "save_total_limit" in rows["checkpoint-2"]["reason"]
    assert rows["checkpoint-6"]["status"] == "missing", rows["checkpoint-6"]
    assert report["missing"] == [str(out / "checkpoint-6")], report


def test_lightning_save_top_k_is_removed_by_trainer(
    workspace: Workspace, torch_files: Path
) -> None:
    ws = workspace
    ckpts = ws.root / "pl" / "ckpts"
    shutil.copytree(torch_files / "pl" / "ckpts", ckpts, copy_function=shutil.copy2)
    top_k = sorted(p.name for p in ckpts.glob("epoch=*.ckpt"))
    # The epoch-0 file save_top_k=2 deleted in the real run, back as it was before that.
    first = ckpts / "epoch=0-step=4-val_loss=9.999.ckpt"
    shutil.copy2(ckpts / top_k[0], first)
    ws.run("scan")
    first.unlink()
    (ckpts / top_k[0]).unlink()  # still in best_k_models: deleted by someone else
    ws.run("scan")
    rows = _rows(ws)
    assert rows[first.name]["status"] == "removed" and "save_top_k" in rows[first.name]["reason"]
    assert rows[top_k[0]]["status"] == "missing", rows[top_k[0]]


def test_what_the_trainer_names_its_best_is_protected(
    workspace: Workspace, hf_runs: Path, torch_files: Path
) -> None:
    ws = workspace
    shutil.copytree(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    shutil.copytree(torch_files / "pl" / "ckpts", ws.root / "pl" / "ckpts")
    ws.run("scan")
    best = Path(load_truth(hf_runs)["trainer"]["folders"]["checkpoint-6"]["best_model_checkpoint"])
    assert best.name == "checkpoint-4"  # older than the newest: only its trainer's word keeps it
    plans = {p["run"]: p for p in ws.json("prune", "--keep-last", "1", "--dry-run")["runs"]}
    decisions = {Path(d["path"]).name: d for p in plans.values() for d in p["decisions"]}
    assert decisions["checkpoint-4"]["action"] == "keep", decisions["checkpoint-4"]
    assert any("best_model_checkpoint" in r for r in decisions["checkpoint-4"]["reasons"])
    kept_by_lightning = [
        d for n, d in decisions.items() if n.startswith("epoch=") and d["action"] == "keep"
    ]
    assert len(kept_by_lightning) == 2, decisions
    assert all(any("best_k_models" in r for r in d["reasons"]) for d in kept_by_lightning)


def test_a_top_k_deletion_seen_before_the_next_save_is_indexed_becomes_removed(
    workspace: Workspace, torch_files: Path
) -> None:
    """Lightning saves epoch N's file, then deletes the file it drops from its top-k: a scan in
    between (the new file not complete yet, or a scan of the deleted path alone, as the
    daemon's delete event starts) sees a deletion the newest file does not explain yet. Once
    the new file is in, the row is the trainer's rotation (issue 41: "3 missing" in the web
    view for a plain save_top_k run)."""
    ws = workspace
    source = torch_files / "pl" / "ckpts"
    ckpts = ws.root / "pl" / "ckpts"
    ckpts.mkdir(parents=True)
    older, newer = sorted(p.name for p in source.glob("epoch=*.ckpt"))
    assert older.startswith("epoch=1-") and newer.startswith("epoch=2-")
    logged = json.loads((torch_files / "pl" / LIGHTNING_TRUTH).read_text())["logged_val_loss"]
    # The epoch-0 file as it was before the epoch-2 save deleted it (its real name: epoch 1's
    # best_k_models lists it), a little older than epoch 1's.
    first = ckpts / f"epoch=0-step=4-val_loss={logged['0']:.3f}.ckpt"
    shutil.copy2(source / older, ckpts / older)
    shutil.copy2(source / older, first)
    stamp = (ckpts / older).stat().st_mtime - 60
    os.utime(first, (stamp, stamp))
    ws.run("scan")
    first.unlink()  # the trainer's epoch-2 save, its file not here yet
    ws.run("scan", str(first))  # the delete event's scan of that path alone
    assert _rows(ws)[first.name]["status"] == "missing"  # nothing explains it yet
    shutil.copy2(source / newer, ckpts / newer)
    shutil.copy2(source / "last.ckpt", ckpts / "last.ckpt")
    report = ws.json("scan")
    row = _rows(ws)[first.name]
    assert row["status"] == "removed" and "save_top_k" in row["reason"], row
    assert [r["path"] for r in report["removed"]] == [str(first)], report
    assert _rows(ws)[older]["status"] == _rows(ws)[newer]["status"] == "ok"
    # A delete event's scan of the rotated path alone, after the new file is in: removed too.
    shutil.copy2(source / older, first)
    os.utime(first, (stamp, stamp))
    ws.run("scan")
    first.unlink()
    ws.run("scan", str(first))
    assert _rows(ws)[first.name]["status"] == "removed"
