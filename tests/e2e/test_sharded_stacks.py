"""Large-model sharded saves through the real CLI (issue 44): FSDP2 with 2 ranks on gloo saved
through DCP and as verl's per-rank torch files, a Megatron-Core-style torch_dist `iter_N/` and
a legacy Megatron `iter_N/mp_rank_00/`, all written by torch itself in children
(tests/support/sharded_saves.py). Each is one catalog entry with its world size and global
shapes; a rank file missing or cut short, or a tracker not naming the iteration yet, is
`incomplete`, then `abandoned`, never resumable; `ckpt split` consolidates the model without
torch into a safetensors that torch (in a child) finds identical, bit for bit, to torch's own
consolidation (`dcp_to_torch_save`). torch is never imported by the test process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace
from tests.support.sharded_saves import TRUTH, session_sharded_saves

PARTS = ("fsdp/step-3", "verl", "megatron", "megatron-legacy")
ENTRIES = {
    "fsdp/step-3": "torch-dcp",
    "verl/global_step_3/actor": "torch-rank-files",
    "megatron/iter_0000010": "megatron-torch-dist",
    "megatron-legacy/iter_0000010": "megatron-legacy",
}


@pytest.fixture(scope="session")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_sharded_saves(tmp_path_factory)


def _copy(ws: Workspace, sharded: Path, *parts: str) -> None:
    for part in parts:
        shutil.copytree(sharded / part, ws.root / part)


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all")}


def _age(folder: Path, seconds: float) -> None:
    """Every file and folder under `folder` (and it) last touched `seconds` ago."""
    then = time.time() - seconds
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.utime(os.path.join(dirpath, name), (then, then))
    os.utime(folder, (then, then))


def test_each_sharded_save_is_one_checkpoint_with_world_size_and_global_shapes(
    workspace: Workspace, sharded: Path
) -> None:
    ws = workspace
    _copy(ws, sharded, *PARTS)
    ws.run("scan")
    truth = json.loads((sharded / TRUTH).read_text())
    rows = _rows(ws)
    assert {k: r["format"] for k, r in rows.items()} == ENTRIES, rows
    model = {k: v for k, v in truth["model"].items()}
    megatron = {truth["megatron_names"][k]: v for k, v in model.items()}
    legacy = {f"language_model.{k}": v for k, v in model.items()}
    expected = {
        "fsdp/step-3": ({f"model.{k}": v for k, v in model.items()}, 2),
        "verl/global_step_3/actor": (model, 2),
        "megatron/iter_0000010": (megatron, 2),
        "megatron-legacy/iter_0000010": (legacy, 1),
    }
    for path, (tensors, world) in expected.items():
        row = rows[path]
        assert row["status"] == "ok", row
        shown = ws.json("show", str(row["id"]))
        assert shown["world_size"] == world, (path, shown["world_size"])
        text = ws.run("show", str(row["id"])).stdout
        assert f"format {ENTRIES[path]} " in text and f"world size {world}" in text, text
        weights = {
            w["name"]: [w["shape"], w["dtype"]] for x in shown["layers"] for w in x["weights"]
        }
        assert weights == tensors, (path, weights)
        assert row["weights_bytes"] == truth["model_bytes"], path
    card = ws.run("describe", str(rows["verl/global_step_3/actor"]["id"])).stdout
    assert "| world size | 2 |" in card, card
    assert rows["verl/global_step_3/actor"]["step"] == truth["fsdp_step"]
    assert rows["megatron/iter_0000010"]["step"] == truth["megatron_iteration"]
    assert rows["verl/global_step_3/actor"]["optimizer_bytes"] > 0
    waited = ws.run("wait", "--run", "verl", "--newer-than", "0", "--timeout", "10s")
    assert waited.stdout.strip() == str(ws.root / "verl/global_step_3/actor"), waited
    for run, entry in (("verl", "verl/global_step_3/actor"), ("megatron", "megatron/iter_0000010")):
        resume = ws.json("latest", "--resumable", "--run", run)
        assert resume["path"] == str(ws.root / entry) and resume["resumable"], resume
    assert rows["megatron/iter_0000010"]["optimizer_bytes"] > 0
    assert "torch" not in sys.modules


DAMAGES = {  # copy name -> (fixture part, the entry in it, what is done to it)
    "verl-a": ("verl", "global_step_3/actor", "remove model_world_size_2_rank_1.pt"),
    "verl-b": ("verl", "global_step_3/actor", "truncate optim_world_size_2_rank_0.pt"),
    "verl-c": ("verl", "global_step_3/actor", "tracker 2"),  # verl writes it once all saved
    "megatron-a": ("megatron", "iter_0000010", "tracker 5"),
    "megatron-b": ("megatron", "iter_0000010", "remove __1_0.distcp"),
    "megatron-c": ("megatron", "iter_0000010", "remove metadata.json"),  # Megatron writes it last
}


def test_a_missing_or_short_rank_file_is_incomplete_then_abandoned_a_wrong_one_corrupt(
    workspace: Workspace, sharded: Path
) -> None:
    ws = workspace
    for copy, (part, entry, damage) in DAMAGES.items():
        shutil.copytree(sharded / part, ws.root / copy)
        folder = ws.root / copy / entry
        verb, what = damage.split(" ", 1)
        if verb == "remove":
            (folder / what).unlink()
        elif verb == "truncate":
            data = (folder / what).read_bytes()
            (folder / what).write_bytes(data[: len(data) // 2])
        else:  # the tracker above the save's folder (Megatron's iter_N, verl's global_step_N)
            tracker = ws.root / copy / "latest_checkpointed_iteration.txt"
            tracker.write_text(what)
    # Rank 0's model file under rank 1's name: every rank there and whole, but two pieces claim
    # the same rows and the last rows have none: corrupt (core.tiling), never consolidated
    shutil.copytree(sharded / "verl", ws.root / "verl-copied")
    actor = ws.root / "verl-copied" / "global_step_3" / "actor"
    shutil.copyfile(actor / "model_world_size_2_rank_0.pt", actor / "model_world_size_2_rank_1.pt")
    assert ws.run("scan", check=False).returncode == 3  # the corrupt one is a failed item
    rows = _rows(ws)
    copied = rows["verl-copied/global_step_3/actor"]
    assert copied["status"] == "corrupt" and "overlap" in copied["reason"], copied
    refused = ws.run("split", str(copied["id"]), check=False)
    assert refused.returncode == 2 and "only ok checkpoints" in refused.stderr, refused
    assert not list(actor.parent.glob("*.safetensors"))
    for copy, (_part, entry, damage) in DAMAGES.items():
        row = rows[f"{copy}/{entry}"]
        assert row["status"] == "incomplete", (damage, row)
        run = str(Path(copy, entry).parent)
        assert ws.run("latest", "--resumable", "--run", run, check=False).returncode, damage
    waited = ws.run("wait", "--run", "verl-a", "--newer-than", "0", "--timeout", "1s", check=False)
    assert waited.returncode == 6, waited  # an incomplete save never answers `wait`
    for copy in DAMAGES:
        _age(ws.root / copy, 2 * 3600)  # untouched longer than completion.abandoned_after
    assert ws.run("scan", check=False).returncode == 3  # an abandoned save is a failed item
    rows = _rows(ws)
    for copy, (_part, entry, damage) in DAMAGES.items():
        assert rows[f"{copy}/{entry}"]["status"] == "abandoned", (damage, rows)


COMPARE = r"""
import json, sys, torch
from safetensors.torch import load_file
pairs = json.loads(sys.argv[1])
def ref_of(path, nested):
    if nested == "legacy":  # Megatron's own file, loaded by torch: its model's tensors
        model = torch.load(path, weights_only=False)["model"]["language_model"]
        return {f"language_model.{k}": v for k, v in model.items()}
    sd = torch.load(path, weights_only=True)
    if nested:
        return sd["model"]
    return {k: v for k, v in sd.items() if not k.startswith("optimizer.")}
def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
out = {}
for artifact, reference, nested in pairs:
    got, ref = load_file(artifact), ref_of(reference, nested)
    out[artifact] = {"names": sorted(got) == sorted(ref),
                     "differs": [k for k in got if k in ref and not same(got[k], ref[k])],
                     "dtypes": {k: str(v.dtype) for k, v in got.items()}}
print(json.dumps(out))
"""


def test_split_consolidates_without_torch_bit_for_bit_like_dcp_to_torch_save(
    workspace: Workspace, sharded: Path
) -> None:
    ws = workspace
    _copy(ws, sharded, "fsdp/step-3", "verl", "megatron", "megatron-legacy")
    ws.run("scan")
    rows = _rows(ws)
    truth = json.loads((sharded / TRUTH).read_text())
    references = {
        "fsdp/step-3": (truth["references"]["fsdp"], True),
        "verl/global_step_3/actor": (truth["references"]["fsdp"], True),
        "megatron/iter_0000010": (truth["references"]["megatron"], False),
        "megatron-legacy/iter_0000010": (
            "megatron-legacy/iter_0000010/mp_rank_00/model_optim_rng.pt",
            "legacy",
        ),
    }
    pairs = []
    for entry, (reference, nested) in references.items():
        result = ws.json("split", str(rows[entry]["id"]))
        artifact = Path(result["artifact"])
        assert artifact == (ws.root / entry).with_name(
            Path(entry).name + ".consolidated.safetensors"
        ), result
        pairs.append([str(artifact), str(sharded / reference), nested])
    ws.run("scan")  # the artifacts are ours, never new checkpoints
    assert set(_rows(ws)) == set(rows)
    # a torch_dist iteration loads through DCP in the sandboxed child, like a DCP folder
    verdicts = ws.json("verify", "--load", str(rows["megatron/iter_0000010"]["id"]))
    assert all(v["ok"] for v in verdicts), verdicts
    assert any("loads with torch" in v["detail"] for v in verdicts), verdicts
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps(pairs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    dtypes = {k: "torch." + v[1] for k, v in truth["model"].items()}
    for artifact, seen in found.items():
        assert seen["names"] and seen["differs"] == [], (artifact, seen)
        if "megatron" not in artifact:
            assert seen["dtypes"] == dtypes  # the dtype it was trained in (bf16 head)
    assert "torch" not in sys.modules


def test_retention_demotes_a_sharded_save_only_to_its_verified_consolidated_model(
    workspace: Workspace, sharded: Path
) -> None:
    """Over a run's `max_bytes`, the older Megatron iteration is demoted: the consolidated
    model written and verified first, then the iteration folder (its optimizer state with it)
    moved to the trash whole."""
    ws = workspace
    _copy(ws, sharded, "megatron")
    run = ws.root / "megatron"
    shutil.copytree(run / "iter_0000010", run / "iter_0000005")  # the tracker names 10 >= 5
    total = sum(p.stat().st_size for p in (run / "iter_0000010").iterdir())
    # over budget by less than one iteration's optimizer state (2,954 bytes of exp_avg): the
    # demotion alone brings the run under it
    ws.config.write_text(
        ws.config.read_text() + f"retention:\n  keep_last: 2\n  max_bytes: {2 * total - 1500}\n"
    )
    ws.run("scan")
    planned = ws.json("prune", "--dry-run")
    actions = {Path(d["path"]).name: d["action"] for r in planned["runs"] for d in r["decisions"]}
    assert actions == {"iter_0000005": "demote", "iter_0000010": "keep"}, planned
    ws.run("prune")
    assert not (run / "iter_0000005").exists() and (run / "iter_0000010").is_dir()
    artifact = run / "iter_0000005.consolidated.safetensors"
    assert artifact.is_file()
    rows = _rows(ws)
    assert rows["megatron/iter_0000005"]["status"] == "trashed"
    truth = json.loads((sharded / TRUTH).read_text())
    with open(artifact, "rb") as f:  # the model's tensors only, each whole
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    names = {truth["megatron_names"][k]: v for k, v in truth["model"].items()}
    assert {k: v["shape"] for k, v in header.items() if k != "__metadata__"} == {
        k: v[0] for k, v in names.items()
    }
