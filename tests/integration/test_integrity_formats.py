"""Issue 43 item 5: the integrity scan reads the weights of files written by the real libraries
(in child processes: the session's fixtures), every floating tensor once: Hugging Face folders
(a Trainer checkpoint's model.safetensors, `.bin` shards), a DCP folder (each item a torch.save
zip inside its data file), a Lightning `.ckpt`, Keras `.keras` and `.weights.h5`. Each is
finite, with every parameter of the truth counted."""

from __future__ import annotations

import json
from pathlib import Path

from ckpt_daemon.core import health
from ckpt_daemon.core.model import Format
from ckpt_daemon.formats import weight_scan


def _finite(path: Path, fmt: Format) -> weight_scan.Scan:
    found = weight_scan.scan(path, fmt)
    doc = health.result(found.tallies, len(found.files))
    assert doc["metrics"]["integrity:nonfinite_tensors"] == 0, doc
    assert doc["metrics"]["integrity:tensors"] > 0 and doc["note"].startswith("finite: ")
    return found


def test_hugging_face_folders(hf_runs: Path) -> None:
    truth = json.loads((hf_runs / "hf-truth.json").read_text())
    folder = hf_runs / "trainer" / "out" / sorted(truth["trainer"]["folders"])[0]
    found = _finite(folder, Format.HF_FOLDER)
    assert found.files == ["model.safetensors"]  # the weights, not optimizer.pt
    assert sum(t.elements for t in found.tallies) == truth["pretrained"]["n_params"]
    shards = _finite(hf_runs / "sharded-bin" / "tiny", Format.HF_FOLDER)
    assert shards.files == truth["sharded-bin"]["shards"]
    assert sum(t.elements for t in shards.tallies) == truth["sharded-bin"]["n_params"]
    assert all(t.name.startswith("pytorch_model-0000") for t in shards.tallies)


def test_a_dcp_folder_item_by_item(async_saves: Path) -> None:
    truth = json.loads((async_saves / "dcp" / "truth.json").read_text())
    found = _finite(async_saves / "dcp" / "step-7", Format.TORCH_DCP)
    by_name = {t.name: t for t in found.tallies}
    for key, (shape, _dtype) in truth["model"].items():
        n = 1
        for d in shape:
            n *= d
        assert by_name[key].elements == n, key
    assert any(name.startswith("optim.state.") for name in by_name)  # AdamW's moments too


def test_a_lightning_checkpoint_and_plain_torch_files(torch_files: Path) -> None:
    lightning = next((torch_files / "pl").rglob("*.ckpt"))
    found = _finite(lightning, Format.LIGHTNING)
    assert any(t.name.startswith("state_dict.") for t in found.tallies)
    views = _finite(torch_files / "plain" / "views.pt", Format.TORCH_ZIP)
    assert len(views.tallies) >= 2
    assert weight_scan.scannable(Format.TORCH_ZIP)


def test_keras_archives_and_weights_files(keras_checkpoints: Path) -> None:
    archive = next(keras_checkpoints.rglob("*.keras"))
    found = _finite(archive, Format.KERAS_ZIP)
    assert any("vars" in t.name for t in found.tallies)
    weights = next(keras_checkpoints.rglob("*.weights.h5"))
    _finite(weights, Format.KERAS_WEIGHTS_H5)
