"""What the DeepSpeed reader and consolidation refuse (tests/e2e/test_deepspeed.py checks what
they write against DeepSpeed's own consolidation): a tag with a rank's partition missing is
never consolidated; a world size no job has is corrupt at once."""

from __future__ import annotations

import pickle
import shutil
import zipfile
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint, UsageError
from ckpt_daemon.formats import detect
from ckpt_daemon.transforms import deepspeed_consolidate


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
