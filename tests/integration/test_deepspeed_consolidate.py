"""The consolidation of a real DeepSpeed checkpoint (tests/support/deepspeed_runs.py) into
safetensors shards with their index when it passes the shard size, and its refusals: a tag
with a rank's partition missing is never consolidated. torch is only imported by the child
that compares the output with DeepSpeed's own consolidation."""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint, UsageError
from ckpt_daemon.formats import detect
from ckpt_daemon.transforms import deepspeed_consolidate
from tests.support.deepspeed_runs import compare_in_child, load_truth


def test_above_the_shard_size_it_writes_shards_and_an_index(
    tmp_path: Path, deepspeed_runs: Path
) -> None:
    pairs = []
    for stage in (2, 3):
        truth = load_truth(deepspeed_runs)["stages"][str(stage)]
        run = shutil.copytree(deepspeed_runs / truth["folder"], tmp_path / f"run{stage}")
        tag = run / truth["tags"][0]
        result = deepspeed_consolidate.split(tmp_path, tag, shard_bytes=600)
        assert result.path == run / f"{tag.name}.inference" and result.path.is_dir(), result
        index = json.loads((result.path / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) > 2 and shards[0].startswith("model-00001-of-"), shards
        assert sorted(p.name for p in result.path.iterdir()) == sorted(
            [*shards, "model.safetensors.index.json"]
        )
        pairs.append(
            (result.path, deepspeed_runs / "reference" / f"zero{stage}-{tag.name}.safetensors")
        )
    for found in compare_in_child(*pairs):
        assert found["differ"] == [] and found["tensors"] == found["reference"], found
    assert "torch" not in sys.modules


def test_a_tag_with_a_rank_missing_is_never_consolidated(
    tmp_path: Path, deepspeed_runs: Path
) -> None:
    run = shutil.copytree(deepspeed_runs / "zero3", tmp_path / "run")
    tag = run / "global_step2"
    (tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    with pytest.raises(UsageError, match=r"zero_pp_rank_1_mp_rank_00_optim_states\.pt missing"):
        deepspeed_consolidate.split(tmp_path, tag)
    assert sorted(p.name for p in run.iterdir()) == sorted(
        p.name for p in (deepspeed_runs / "zero3").iterdir()
    )  # nothing written


def test_a_world_size_no_job_has_is_refused_before_any_file_is_listed(tmp_path: Path) -> None:
    """A model-states pickle claiming 10^9 ranks (a hostile or broken file) is corrupt at once,
    never a list of a billion expected files."""
    tag = tmp_path / "global_step1"
    tag.mkdir()
    record = {"dp_world_size": 10**9, "mp_world_size": 1, "module": {}, "param_shapes": []}
    with zipfile.ZipFile(tag / "mp_rank_00_model_states.pt", "w") as archive:
        archive.writestr("mp_rank_00_model_states/data.pkl", pickle.dumps(record, protocol=2))
    with pytest.raises(CorruptCheckpoint, match="1000000000 x mp_world_size 1"):
        detect.read_checkpoint(tag, root=tmp_path)
