"""Readers of hostile bytes bound the cost before paying it and give the true reason (issue 40
items 4, 9): a safetensors shape of 50,000 dims of 2**61-1 (`math.prod` first: ~70 s), an HF
folder whose `model.safetensors` is a symlink (said "not written yet"), a `trainer_state.json`
nested 100,000 deep (said "not JSON (truncated?)"). Weights files written by safetensors."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint
from ckpt_daemon.formats import detect, hf_folder


def _safetensors_with_shape(path: Path, shape: list[int]) -> Path:
    header = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(4))
    return path


@pytest.mark.parametrize(
    ("shape", "reason"),
    [([(1 << 61) - 1] * 50_000, "50000 dimensions"), ([1 << 40, 1 << 40], r"2\*\*63 elements")],
)
def test_a_safetensors_shape_is_bounded_before_its_product(
    tmp_path: Path, shape: list[int], reason: str
) -> None:
    path = _safetensors_with_shape(tmp_path / "dims.safetensors", shape)
    started = time.monotonic()
    with pytest.raises(CorruptCheckpoint, match=reason):
        detect.read_checkpoint(path)
    assert time.monotonic() - started < 2.0  # the JSON parse of 1 MB; the product is free


def _hf_folder(folder: Path, weights: Path | None = None) -> Path:
    folder.mkdir(parents=True)
    # Written by the real library in a child: the test process never imports it (the readers'
    # tests check that nothing of ours did).
    code = (
        "import sys, numpy as np; from safetensors.numpy import save_file; "
        "save_file({'w': np.zeros((2, 2), np.float32)}, sys.argv[1])"
    )
    target = str(weights or folder / "model.safetensors")
    subprocess.run([sys.executable, "-c", code, target], check=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return folder


def test_a_symlinked_weights_file_is_named_as_refused_not_missing(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.safetensors"
    folder = _hf_folder(tmp_path / "run" / "out", weights=elsewhere)
    (folder / "model.safetensors").symlink_to(elsewhere)
    with pytest.raises(CorruptCheckpoint) as raised:
        hf_folder.read(folder, tmp_path / "run")
    assert "model.safetensors is a symlink: refused" in str(raised.value)
    assert "not written yet" not in str(raised.value)


def test_a_trainer_state_nested_100000_deep_says_so(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path / "run" / "checkpoint-5")
    (folder / "trainer_state.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CorruptCheckpoint) as raised:
        hf_folder.read(folder, tmp_path / "run")
    assert "trainer_state.json is JSON nested too deep to read" in str(raised.value)
