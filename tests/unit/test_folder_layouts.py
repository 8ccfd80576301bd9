"""Which folders a layout claims, from names alone (fs.folder_layouts), and what moves whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.fs import folder_layouts

T = frozenset
CASES = [
    # (folder name, files, subfolders) -> (claimed, whole)
    ("checkpoint-4", T({"config.json"}), T(), (True, True)),  # a Trainer save just begun
    ("checkpoint-4", T({"optimizer.pt", "model.safetensors"}), T(), (True, True)),
    ("tiny", T({"config.json", "model.safetensors"}), T(), (True, True)),  # save_pretrained
    ("tiny", T({"model.safetensors.index.json"}), T(), (True, True)),  # sharded, shards to come
    ("out", T({"config.json", "model.safetensors"}), T({"checkpoint-2", "runs"}), (True, False)),
    ("run", T({"model.safetensors"}), T(), (False, False)),  # a lone safetensors file is a file
    ("run", T({"config.json", "notes.txt"}), T(), (False, False)),
    ("checkpoint-x", T({"config.json"}), T(), (False, False)),
    # the HF Trainer under DeepSpeed: the tag folder inside is the Trainer folder's
    ("checkpoint-4", T({"latest", "config.json"}), T({"global_step4"}), (True, True)),
]


@pytest.mark.parametrize(("name", "files", "dirs", "expected"), CASES)
def test_claims(name: str, files: frozenset[str], dirs: frozenset[str], expected: tuple) -> None:
    found = folder_layouts.claim(Path("/nowhere") / name, files, dirs)
    assert (found is not None, bool(found and found.whole)) == expected
    if found is not None:
        assert found.family == "hf-folder"


@pytest.mark.parametrize(
    ("files", "claimed"),
    [
        (T({"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"}), True),
        (T({"zero_pp_rank_3_mp_rank_00_model_states.pt"}), True),  # ZeRO-3, a rank's first
        (T({"bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"}), True),
        (T({"model_states.pt", "latest"}), False),
    ],
)
def test_deepspeed_tag_folders(files: frozenset[str], claimed: bool) -> None:
    found = folder_layouts.claim(Path("/nowhere/global_step7"), files, T())
    assert (found is not None and found.family == "deepspeed-zero" and found.whole) == claimed


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("/r/out/checkpoint-6/anything.bin", "/r/out/checkpoint-6"),
        ("/r/m/trainer_state.json", "/r/m"),
        ("/r/m/model-00002-of-00003.safetensors", "/r/m"),
        ("/r/m/pytorch_model.bin.index.json", "/r/m"),
        ("/r/m/model.safetensors", None),  # a file of its own unless its folder is claimed
        ("/r/m/e01.keras", None),
        # DeepSpeed: a rank file announces its tag folder, or the Trainer folder holding it
        ("/r/ds/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt", "/r/ds/global_step3"),
        ("/r/ds/my-tag/mp_rank_00_model_states.pt", "/r/ds/my-tag"),
        (
            "/r/o/checkpoint-4/global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt",
            "/r/o/checkpoint-4",
        ),
    ],
)
def test_announced_folder(path: str, folder: str | None) -> None:
    found = folder_layouts.announced_folder(Path(path))
    assert (str(found) if found else None) == folder
