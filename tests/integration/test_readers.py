"""The metadata readers against ground truth recorded from the live Keras objects.

Every checkpoint here was written by real Keras 3 / tf-keras (tests/support/keras_fixtures.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.core.model import CheckpointInfo
from ckpt_daemon.formats.detect import read_checkpoint

pytestmark = pytest.mark.slow
KERAS_FORMATS = {
    "keras-v3-zip",
    "keras-v3-weights-h5",
    "keras-legacy-h5",
    "keras-legacy-weights-h5",
}


def keras_entries(manifest: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(k for k, v in manifest.items() if v["format"] in KERAS_FORMATS)


def test_every_keras_file_matches_its_ground_truth(
    keras_checkpoints: Path, manifest: dict[str, dict[str, Any]]
) -> None:
    checked = 0
    for rel in keras_entries(manifest):
        truth = manifest[rel]
        info = read_checkpoint(keras_checkpoints / rel)
        assert info.format.value == truth["format"], rel
        assert info.kind.value == truth["kind"], rel
        assert info.n_params == truth["n_params"], rel
        assert info.n_trainable_params == truth["n_trainable_params"], rel
        assert sum(layer.n_params for layer in info.layers) == truth["n_params"], rel
        _check_optimizer(rel, info, truth)
        if truth["model_class"] is not None:
            # Files with an architecture give layers in model order.
            assert [layer.name for layer in info.layers] == truth["layer_names"], rel
            assert info.model_class == truth["model_class"], rel
            assert info.model_name == truth["model_name"], rel
        else:
            assert sorted(layer.name for layer in info.layers) == sorted(truth["layer_names"])
        checked += 1
    assert checked >= 10


def _check_optimizer(rel: str, info: CheckpointInfo, truth: dict[str, Any]) -> None:
    opt = info.optimizer
    if not truth["has_optimizer_state"]:
        assert opt is None or opt.n_variables == 0, rel
        assert info.optimizer is None or info.optimizer.state_bytes == 0, rel
        return
    assert opt is not None, rel
    assert opt.iterations == truth["iterations"], rel
    assert opt.learning_rate == truth["learning_rate"], rel
    # Adam keeps two float32 slots per trainable weight (plus iteration and learning rate).
    assert opt.state_bytes >= 2 * 4 * truth["n_trainable_params"], rel
    assert opt.state_bytes <= 2 * 4 * truth["n_trainable_params"] + 16, rel
    if truth["format"] != "keras-v3-weights-h5":  # that format does not record the class
        assert opt.class_name == truth["optimizer_class"], rel
    else:
        assert opt.class_name is None and opt.name, rel


def test_weights_bytes_are_the_weights(keras_checkpoints: Path, manifest: dict[str, Any]) -> None:
    for rel in keras_entries(manifest):
        info = read_checkpoint(keras_checkpoints / rel)
        assert info.weights_bytes == 4 * manifest[rel]["n_params"], rel  # all float32 here


def test_learning_rate_schedule_is_reported_as_config(keras_checkpoints: Path) -> None:
    info = read_checkpoint(keras_checkpoints / "k3/schedule/lr_schedule.keras")
    assert info.optimizer is not None and info.optimizer.config is not None
    schedule = info.optimizer.config["learning_rate"]
    assert schedule["class_name"] == "ExponentialDecay"
    assert info.optimizer.learning_rate is None  # no stored LR variable with a schedule


def test_resume_notes(keras_checkpoints: Path) -> None:
    def notes(rel: str) -> str:
        return " ".join(read_checkpoint(keras_checkpoints / rel).notes)

    assert "resume: yes" in notes("k3/run_zip/e01-vl1.683.keras")
    assert "resume: unreliable" in notes("k3/legacy/full.h5")  # Keras 3 legacy .h5 (bug B1)
    assert "resume: no" in notes("k3/legacy/noopt.h5")
    assert "tf-keras" in notes("tfk/run_h5/weights.01-1.69.hdf5")


def test_readers_never_import_tensorflow(keras_checkpoints: Path, manifest: dict[str, Any]) -> None:
    paths = [str(keras_checkpoints / rel) for rel in keras_entries(manifest)]
    script = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from ckpt_daemon.formats.detect import read_checkpoint\n"
        "for p in json.loads(sys.argv[1]): read_checkpoint(Path(p))\n"
        "print(json.dumps(sorted(m for m in ('tensorflow', 'keras', 'tf_keras') "
        "if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(paths)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == []


def test_keras_archive_is_read_through_a_window_not_extracted(
    keras_checkpoints: Path, tmp_path: Path
) -> None:
    """A .keras whose inner weights file was recompressed still reads (via a temp copy)."""
    import zipfile

    source = keras_checkpoints / "k3/run_zip/e01-vl1.683.keras"
    target = tmp_path / "deflated.keras"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename))
    assert read_checkpoint(target) == read_checkpoint(source)
