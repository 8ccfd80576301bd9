"""Where an HF inference folder goes (transforms.hf_split): never a name the Trainer's rotation
globs (`checkpoint-*`), never into a `checkpoint-*` folder nor inside a Trainer checkpoint, and
which files are the training state it leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.transforms.hf_split import inference_path, is_training_state, refuse_rotated

ROOT = Path("/data/runs")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("out/checkpoint-6", "out/inference-6"),
        ("out/checkpoint-best", "out/inference-best"),
        ("exp/final", "exp/final.inference"),
    ],
)
def test_the_inference_folder_is_named_beside_the_checkpoint(source: str, expected: str) -> None:
    final = inference_path(ROOT / source)
    assert final == ROOT / expected and not final.name.startswith("checkpoint-")
    refuse_rotated(ROOT, final)  # allowed
    assert inference_path(ROOT / source, ROOT / "exports") == ROOT / "exports" / final.name


@pytest.mark.parametrize(
    "final",
    [
        "out/checkpoint-6/inference-4",  # into a checkpoint: its mtime would change
        "out/checkpoint-6/sub/inference-4",  # inside one: part of it
        "out/checkpoint-tmp/inference-4",  # into a folder the rotation globs
        "out/checkpoint-4",  # a name the rotation deletes
    ],
)
def test_nothing_goes_where_the_trainers_rotation_looks(final: str) -> None:
    with pytest.raises(UsageError):
        refuse_rotated(ROOT, ROOT / final)


def test_a_users_folder_named_checkpoint_something_higher_up_is_fine() -> None:
    refuse_rotated(ROOT, ROOT / "checkpoint-runs" / "out" / "inference-6")


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("optimizer.pt", True),
        ("scheduler.pt", True),
        ("scaler.pt", True),
        ("rng_state.pth", True),
        ("rng_state_3.pth", True),
        ("trainer_state.json", True),
        ("training_args.bin", True),
        ("config.json", False),
        ("generation_config.json", False),
        ("model-00001-of-00002.safetensors", False),
        ("pytorch_model.bin", False),
        ("tokenizer.json", False),
        ("special_tokens_map.json", False),
    ],
)
def test_training_state_is_left_out_and_the_rest_kept(name: str, state: bool) -> None:
    assert is_training_state(name) is state
