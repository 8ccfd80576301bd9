"""The torch-family readers on files real torch, safetensors and Lightning wrote (in children:
tests/support/torch_runs.py): every field checked against what the writer reported. Read the
way the indexer reads them, in the reader child; torch is never imported here."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.children import reader_child
from ckpt_daemon.core.errors import CorruptCheckpoint
from ckpt_daemon.core.model import CheckpointInfo, Kind
from ckpt_daemon.core.resume import resumability
from ckpt_daemon.formats import detect
from tests.support.torch_runs import LIGHTNING_TRUTH, PLAIN_TRUTH, close, load_truth


def _tensors(info: CheckpointInfo) -> dict[str, list[Any]]:
    return {w.name: [w.dtype, list(w.shape)] for layer in info.layers for w in layer.weights}


def _check_common(info: CheckpointInfo, truth: dict[str, Any]) -> None:
    assert info.format.value == truth["format"]
    assert _tensors(info) == truth["tensors"]
    assert info.n_params == truth["n_params"]
    assert info.weights_bytes == truth["bytes"]
    opt = info.optimizer
    verdict = resumability(info.format, info.kind.value, opt.state_bytes if opt else 0, None)
    assert verdict.resumable is truth["resumable"], verdict


def _check_optimizer(info: CheckpointInfo, truth: dict[str, Any]) -> None:
    opt = info.optimizer
    assert opt is not None
    assert opt.class_name == truth["class"]
    assert opt.config is not None and opt.config["class_inferred"] is True
    groups = [{k: v for k, v in g.items() if k != "n_params"} for g in opt.config["param_groups"]]
    assert groups == truth["param_groups"]
    assert opt.state_bytes == truth["state_bytes"]
    assert opt.n_variables == truth["n_state_tensors"]
    assert opt.iterations == truth["step"]
    assert opt.learning_rate == truth["param_groups"][0]["lr"]


PLAIN = [
    "sd.pt",
    "full.pt",
    "no_trainer_state.pt",
    "optimizer.pt",
    "views.pt",
    "renamed.bin",
    "legacy.pth",
    "model.safetensors",
]


@pytest.mark.parametrize("name", PLAIN)
def test_plain_torch_files_read_as_torch_reports_them(torch_files: Path, name: str) -> None:
    truth = load_truth(torch_files / PLAIN_TRUTH)[name]
    info = reader_child.read(torch_files / "plain" / name)
    _check_common(info, truth)
    if "optimizer" in truth:
        _check_optimizer(info, truth["optimizer"])
    else:
        assert info.optimizer is None
    recorded = info.recorded or {}
    assert recorded.get("epoch") == truth.get("epoch")
    assert recorded.get("step") == truth.get("step")
    for metric, value in truth.get("metrics", {}).items():
        assert close(recorded["metrics"][metric], value), (metric, recorded)
    if "scheduler" in truth:
        assert info.training_config is not None
        scheduler = info.training_config["scheduler"]
        assert {k: scheduler[k] for k in truth["scheduler"]} == truth["scheduler"]
    if "metadata" in truth:
        assert recorded["metadata"] == truth["metadata"]
    assert "torch" not in sys.modules and "safetensors" not in sys.modules


@pytest.mark.parametrize("which", ["epoch=1", "epoch=2", "last"])
def test_lightning_checkpoints_read_as_lightning_reports_them(
    torch_files: Path, which: str
) -> None:
    truth = load_truth(torch_files / "pl" / LIGHTNING_TRUTH)
    name = next(n for n in truth["files"] if n.startswith(which))
    expected = truth["files"][name]
    info = reader_child.read(torch_files / "pl" / "ckpts" / name)
    _check_common(info, expected)
    _check_optimizer(info, expected["optimizer"])
    assert info.kind == Kind.FULL
    training = info.training_config or {}
    assert training["pytorch-lightning_version"] == expected["lightning_version"]
    assert training["monitor"] == expected["monitor"] == "val_loss"
    assert close(training["best_model_score"], expected["best_model_score"])
    assert close(training["current_score"], expected["current_score"])
    assert training["hyper_parameters"] == expected["hyper_parameters"]
    assert training["scheduler"]["type"] == expected["scheduler"]["type"]
    assert training["scheduler"]["last_epoch"] == expected["scheduler"]["last_epoch"]
    recorded = info.recorded or {}
    assert (recorded["epoch"], recorded["step"]) == (expected["epoch"], expected["step"])
    # The file's own metric is the value Lightning logged at its epoch.
    logged = truth["logged_val_loss"][str(expected["epoch"])]
    assert close(recorded["metrics"]["val_loss"], logged)
    assert "torch" not in sys.modules and "lightning" not in sys.modules


def test_a_torch_zip_cut_short_is_not_a_zip_and_says_so(torch_files: Path, tmp_path: Path) -> None:
    """The central directory comes last: a file still being saved has none (the caller then
    judges it incomplete by its age, never corrupt while it changes)."""
    data = (torch_files / "plain" / "full.pt").read_bytes()
    cut = tmp_path / "full.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpoint, match="central directory"):
        detect.read_checkpoint(cut)


def test_a_safetensors_file_one_byte_short_or_long_is_corrupt(
    torch_files: Path, tmp_path: Path
) -> None:
    data = (torch_files / "plain" / "model.safetensors").read_bytes()
    for label, damaged in (("short", data[:-1]), ("long", data + b"\0")):
        path = tmp_path / f"{label}.safetensors"
        path.write_bytes(damaged)
        with pytest.raises(CorruptCheckpoint, match=r"truncated|trailing"):
            detect.read_checkpoint(path)


def test_a_legacy_file_cut_short_is_corrupt(torch_files: Path, tmp_path: Path) -> None:
    path = tmp_path / "legacy.pth"
    shutil.copy(torch_files / "plain" / "legacy.pth", path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 4)
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        detect.read_checkpoint(path)
