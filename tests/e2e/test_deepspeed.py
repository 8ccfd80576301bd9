"""DeepSpeed ZeRO checkpoints written by DeepSpeed itself (tests/support/deepspeed_runs.py: ZeRO-2
and ZeRO-3, 2 CPU ranks): one catalog entry per tag folder with the world size, stage, step and
shapes of its small records; a rank's file missing or cut makes it `incomplete` while the folder
is young and `abandoned` once it settled, never `ok`, and `latest --resumable` passes over it.
torch and deepspeed are never imported by the test process."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ckpt_daemon.transforms import deepspeed_consolidate
from tests.support import Workspace
from tests.support.deepspeed_runs import compare_in_child, load_truth

INDEX = "model.safetensors.index.json"


def _rows(ws: Workspace, *args: str) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all", *args)}


def _copy(src: Path, dst: Path, fresh: bool = False) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copyfile if fresh else shutil.copy2)
    return dst


def test_each_tag_folder_is_one_checkpoint_with_world_size_stage_and_shapes(
    workspace: Workspace, deepspeed_runs: Path
) -> None:
    ws, truth = workspace, load_truth(deepspeed_runs)
    for stage in truth["stages"].values():
        _copy(deepspeed_runs / stage["folder"], ws.root / "ds" / stage["folder"])
    ws.run("scan")
    rows = _rows(ws)
    expected = {f"ds/{s['folder']}/{tag}" for s in truth["stages"].values() for tag in s["tags"]}
    assert set(rows) == expected, rows.keys()  # the folders, never their rank files
    for stage in truth["stages"].values():
        tensors = [*stage["param_shapes"].values(), *stage["buffers"].values()]
        n_params = sum(math.prod(shape) for shape in tensors)  # buffers counted, as for torch
        for step, tag in enumerate(stage["tags"], start=1):
            row = rows[f"ds/{stage['folder']}/{tag}"]
            assert row["status"] == "ok" and row["format"] == "deepspeed-zero", row
            assert (row["step"], row["n_params"], row["kind"]) == (step, n_params, "full"), row
            if step != len(stage["tags"]):
                continue  # `show` of the newest of each stage (a CLI process each)
            shown = ws.json("show", str(row["id"]))
            assert (shown["world_size"], shown["zero_stage"]) == (
                truth["world_size"], stage["zero_stage"]
            ), shown  # fmt: skip
            folder = ws.root / "ds" / stage["folder"] / tag
            assert sorted(Path(f).name for f in shown["files"]) == sorted(os.listdir(folder))
            layers = {w["name"]: w["shape"] for layer in shown["layers"] for w in layer["weights"]}
            assert {k: layers[k] for k in stage["param_shapes"]} == stage["param_shapes"]
            assert shown["training_config"]["sharding"]["ds_version"] == truth["ds_version"]
            placeholders = [n for n in shown["notes"] if "placeholder" in n]
            assert bool(placeholders) == (stage["zero_stage"] == 3), shown["notes"]
    assert "torch" not in sys.modules and "deepspeed" not in sys.modules


def test_a_missing_or_cut_rank_is_incomplete_then_abandoned_never_ok(
    tmp_path: Path, deepspeed_runs: Path
) -> None:
    ws = Workspace(tmp_path / "ws", settle_seconds=0)
    gone = _copy(deepspeed_runs / "zero2", ws.root / "gone", fresh=True)
    cut = _copy(deepspeed_runs / "zero3", ws.root / "cut", fresh=True)
    (gone / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    cut_file = cut / "global_step3" / "zero_pp_rank_1_mp_rank_00_model_states.pt"
    os.truncate(cut_file, cut_file.stat().st_size // 2)  # as a rank killed mid-write leaves it
    config = ws.config.read_text()
    ws.config.write_text(config + "  abandoned_after: 10m\n")
    ws.run("scan", check=False)
    rows = _rows(ws)
    for run in ("gone", "cut"):
        assert rows[f"{run}/global_step3"]["status"] == "incomplete", rows[f"{run}/global_step3"]
        assert rows[f"{run}/global_step2"]["status"] == "ok"
    assert (
        "zero_pp_rank_1_mp_rank_00_optim_states.pt missing" in rows["gone/global_step3"]["reason"]
    )
    assert cut_file.name in rows["cut/global_step3"]["reason"]
    for run in ("gone", "cut"):  # a trainer resuming is handed the newest whole tag
        answer = ws.json("latest", "--run", run, "--resumable")
        assert Path(answer["path"]).name == "global_step2", answer
        assert answer["resumable"] is True, answer
    waited = ws.run("wait", "--run", "gone", "--newer-than", "2", "--timeout", "1s", check=False)
    assert waited.returncode == 6, waited.stdout  # a tag missing a rank never answers a wait
    ws.config.write_text(config + "  abandoned_after: 1s\n")  # as if it settled long ago
    time.sleep(1.1)
    ws.run("scan", check=False)
    rows = _rows(ws)
    for run in ("gone", "cut"):
        assert rows[f"{run}/global_step3"]["status"] == "abandoned", rows[f"{run}/global_step3"]
    # the late rank's file arrives after all: the tag is whole, and a wait answers it
    late = deepspeed_runs / "zero2" / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shutil.copyfile(late, gone / "global_step3" / late.name)
    ws.run("scan")
    assert _rows(ws)["gone/global_step3"]["status"] == "ok"
    waited = ws.run("wait", "--run", "gone", "--newer-than", "2", "--timeout", "5s")
    assert Path(waited.stdout.strip()).name == "global_step3", waited.stdout


def test_split_consolidates_each_stage_bit_for_bit_like_zero_to_fp32(
    workspace: Workspace, deepspeed_runs: Path
) -> None:
    """`ckpt split` of a tag folder writes one safetensors of the full model from the fp32
    partitions, without torch; safetensors' torch loader in a child finds every tensor of
    DeepSpeed's own consolidation (`get_fp32_state_dict_from_zero_checkpoint`) in it, same
    dtype, shape and bits (a bf16 run's in bfloat16, cast from the fp32 master weights as
    torch casts); above the shard size, in shards with their index."""
    ws, truth = workspace, load_truth(deepspeed_runs)
    for stage in truth["stages"].values():
        _copy(deepspeed_runs / stage["folder"], ws.root / stage["folder"])
    ws.run("scan")
    rows = _rows(ws)
    pairs, expected = [], []
    for key, stage in truth["stages"].items():  # ZeRO-2, ZeRO-3, ZeRO-2 trained in bf16
        tag = stage["tags"][-1]
        row = rows[f"{stage['folder']}/{tag}"]
        before = sorted(os.listdir(ws.root / stage["folder"] / tag))
        done = ws.json("split", str(row["id"]))
        artifact = Path(done["artifact"])
        assert artifact == ws.root / stage["folder"] / f"{tag}.inference.safetensors", done
        reference = deepspeed_runs / "reference" / f"zero{key}-{tag}.safetensors"
        pairs.append((artifact, reference))
        expected.append(len(stage["consolidated"][tag]))
        assert sorted(os.listdir(ws.root / stage["folder"] / tag)) == before  # untouched
    # above the shard size (5 GB by default; 300 bytes here): shards and their index
    for key, stage in truth["stages"].items():
        tag = ws.root / stage["folder"] / stage["tags"][0]
        result = deepspeed_consolidate.split(ws.root, tag, shard_bytes=300)
        assert result.path == tag.with_name(f"{tag.name}.inference") and result.path.is_dir()
        index = json.loads((result.path / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) > 2 and shards[0].startswith("model-00001-of-"), shards
        assert sorted(p.name for p in result.path.iterdir()) == [*shards, INDEX]
        reference = deepspeed_runs / "reference" / f"zero{key}-{tag.name}.safetensors"
        pairs.append((result.path, reference))
        expected.append(len(stage["consolidated"][tag.name]))
    for found, count in zip(compare_in_child(*pairs), expected, strict=True):
        assert found["differ"] == [] and found["tensors"] == found["reference"] == count, found
    listed = _rows(ws)
    assert not any(p.endswith(".safetensors") for p in listed), listed.keys()  # ours, not new
    assert "torch" not in sys.modules and "safetensors" not in sys.modules


def test_a_trainer_folder_with_deepspeed_state_is_one_resumable_hf_checkpoint(
    tmp_path: Path, deepspeed_runs: Path
) -> None:
    """The HF Trainer under DeepSpeed saves `checkpoint-N/` with `latest` and `global_stepN/`
    inside, no optimizer.pt: one hf-folder entry whose resume state is the DeepSpeed tag
    (ZeRO-3: no weights file at all, the partitions are the only copy); a rank's file removed
    from the newest makes it incomplete and `latest --resumable` answers the one before."""
    ws = Workspace(tmp_path / "ws", settle_seconds=3600)
    for stage in (2, 3):
        _copy(deepspeed_runs / f"hf-zero{stage}" / "out", ws.root / f"z{stage}" / "out")
    cut = ws.root / "z2" / "out" / "checkpoint-4" / "global_step4"
    (cut / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    os.utime(cut)  # as the rank that died left it: just now
    ws.run("scan", check=False)
    rows = _rows(ws)
    names = {f"z{s}/out/checkpoint-{n}" for s in (2, 3) for n in (2, 4)}
    assert set(rows) == names, rows.keys()  # the tag folders are the HF folders' own
    for path, row in rows.items():
        if path == "z2/out/checkpoint-4":
            assert row["status"] == "incomplete", row
            assert "zero_pp_rank_0_mp_rank_00_optim_states.pt missing" in row["reason"], row
            continue
        assert (row["status"], row["format"], row["kind"]) == ("ok", "hf-folder", "full"), row
        shown = ws.json("show", str(row["id"]))
        assert (shown["world_size"], shown["zero_stage"]) == (2, int(path[1])), shown
        assert any(f.endswith("_optim_states.pt") for f in shown["files"]), shown["files"]
        only_copy = [n for n in shown["notes"] if "only copy" in n]
        assert bool(only_copy) == path.startswith("z3"), shown["notes"]
    for stage, newest in ((2, "checkpoint-2"), (3, "checkpoint-4")):
        answer = ws.json("latest", "--run", f"z{stage}/out", "--resumable")
        assert Path(answer["path"]).name == newest and answer["resumable"], answer
        assert "resume" in answer["resume_reason"], answer


def test_demotion_drops_optimizer_shards_only_where_a_complete_weights_copy_stays(
    tmp_path: Path, deepspeed_runs: Path
) -> None:
    """Over `max_bytes`, retention demotes: a ZeRO-3 tag (its model states hold placeholders of
    shape [0], no weights) only once its consolidated model is written and equals DeepSpeed's
    own, bit for bit; an HF ZeRO-2 folder to its inference folder (model.safetensors); an HF
    ZeRO-3 folder, whose only weights are the optimizer partitions, is never demoted."""
    ws = Workspace(tmp_path / "ws")
    _copy(deepspeed_runs / "zero3", ws.root / "z3")
    for stage in (2, 3):
        _copy(deepspeed_runs / f"hf-zero{stage}" / "out", ws.root / f"hf{stage}" / "out")
    config = ws.config.read_text()
    ws.run("scan")
    for budget, runs in ((40_000, ("z3",)), (310_000, ("hf2/out", "hf3/out"))):
        ws.config.write_text(config + f"retention:\n  keep_last: 3\n  max_bytes: {budget}\n")
        for run in runs:  # demoting the older ones fits the run in its budget
            ws.run("prune", "--run", run, check=False)
    rows = _rows(ws)
    pairs = []
    for step in (1, 2):  # the newest is protected; the older ones demoted, never lost
        assert rows[f"z3/global_step{step}"]["status"] == "trashed", rows
        artifact = ws.root / "z3" / f"global_step{step}.inference.safetensors"
        pairs.append(
            (artifact, deepspeed_runs / "reference" / f"zero3-global_step{step}.safetensors")
        )
    for found in compare_in_child(*pairs):
        assert found["differ"] == [] and found["tensors"] == found["reference"], found
    assert rows["z3/global_step3"]["status"] == "ok"
    assert rows["hf2/out/checkpoint-2"]["status"] == "trashed", rows["hf2/out/checkpoint-2"]
    assert (ws.root / "hf2" / "out" / "inference-2" / "model.safetensors").is_file()
    assert not any((ws.root / "hf2" / "out" / "inference-2").rglob("*_states.pt"))
    kept = ws.root / "hf3" / "out" / "checkpoint-2"
    assert rows["hf3/out/checkpoint-2"]["status"] == "ok", rows["hf3/out/checkpoint-2"]
    refused = [e for e in ws.json("log") if e["action"] == "split" and "hf3" in e["path"]]
    assert refused and all("only copy is DeepSpeed's partitions" in str(e) for e in refused)
    assert not (ws.root / "hf3" / "out" / "inference-2").exists()
    source = deepspeed_runs / "hf-zero3" / "out" / "checkpoint-2" / "global_step2"
    assert sorted(p.name for p in (kept / "global_step2").iterdir()) == sorted(
        p.name for p in source.iterdir()
    )
