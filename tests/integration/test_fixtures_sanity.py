"""The generated fixtures are real Keras/TF files and agree with their manifest.

Only h5py, zipfile and json here: TensorFlow is never imported into the pytest process.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import h5py
import pytest

pytestmark = pytest.mark.slow  # the session fixture trains Keras models in child processes

FORMATS = {
    "keras-v3-zip",
    "keras-v3-weights-h5",
    "keras-legacy-h5",
    "keras-legacy-weights-h5",
    "tf-checkpoint",
    "savedmodel",
}
FIELDS = {
    "format",
    "kind",
    "keras_version",
    "model_class",
    "model_name",
    "layer_names",
    "n_params",
    "n_trainable_params",
    "has_optimizer_state",
    "optimizer_class",
    "iterations",
    "learning_rate",
    "epoch",
    "metrics",
}


def _of_format(manifest: dict, fmt: str) -> dict[str, dict]:
    found = {path: e for path, e in manifest.items() if e["format"] == fmt}
    assert found, f"no {fmt} fixture in the manifest"
    return found


def _h5(path: Path) -> h5py.File:
    return h5py.File(path, "r", locking=False)


def test_manifest_schema(manifest):
    assert {e["format"] for e in manifest.values()} == FORMATS
    for path, e in manifest.items():
        assert set(e) == FIELDS, path
        assert e["kind"] in {"full", "weights"}, path
        assert (e["model_class"] is None) == (e["kind"] == "weights"), path
        assert e["layer_names"] == ["x", "fc1", "bn", "act", "head"], path
        assert 0 < e["n_trainable_params"] < e["n_params"], path  # BN moving stats
        assert (e["optimizer_class"] is not None) == e["has_optimizer_state"], path
        assert (e["epoch"] is None) == (e["metrics"] == {}), path


def test_every_manifest_path_exists(keras_checkpoints, manifest):
    for rel, e in manifest.items():
        p = keras_checkpoints / rel
        if e["format"] == "tf-checkpoint":
            assert p.with_name(p.name + ".index").is_file(), rel
            assert p.with_name(p.name + ".data-00000-of-00001").is_file(), rel
        elif e["format"] == "savedmodel":
            assert (p / "saved_model.pb").is_file(), rel
            assert (p / "variables" / "variables.index").is_file(), rel
        else:
            assert p.is_file() and p.stat().st_size > 0, rel


def test_keras_zip_members(keras_checkpoints, manifest):
    for rel in _of_format(manifest, "keras-v3-zip"):
        with zipfile.ZipFile(keras_checkpoints / rel) as z:
            names = set(z.namelist())
            assert {"config.json", "metadata.json", "model.weights.h5"} <= names, rel
            assert z.testzip() is None, rel


def test_legacy_h5_optimizer_weights_match_manifest(keras_checkpoints, manifest):
    entries = _of_format(manifest, "keras-legacy-h5")
    assert {e["has_optimizer_state"] for e in entries.values()} == {True, False}
    for rel, e in entries.items():
        with _h5(keras_checkpoints / rel) as f:
            assert "model_weights" in f, rel
            assert ("optimizer_weights" in f) == e["has_optimizer_state"], rel
            assert ("training_config" in f.attrs) == e["has_optimizer_state"], rel
            assert f.attrs["keras_version"] == e["keras_version"], rel
            if e["has_optimizer_state"]:  # weight_names[0] is the iteration counter in both
                first = f["optimizer_weights"].attrs["weight_names"][0]
                assert first.endswith(("iteration", "iteration:0")), rel
                assert int(f["optimizer_weights"][first][()]) == e["iterations"], rel


def test_k3_weights_h5_includes_optimizer_vars(keras_checkpoints, manifest):
    for rel, e in _of_format(manifest, "keras-v3-weights-h5").items():
        assert e["has_optimizer_state"], rel
        with _h5(keras_checkpoints / rel) as f:
            assert "optimizer/vars" in f and "layers" in f, rel
            assert int(f["optimizer/vars/0"][()]) == e["iterations"], rel
            assert float(f["optimizer/vars/1"][()]) == e["learning_rate"], rel


def test_tfkeras_weights_h5_is_optimizer_free(keras_checkpoints, manifest):
    for rel, e in _of_format(manifest, "keras-legacy-weights-h5").items():
        assert not e["has_optimizer_state"], rel
        with _h5(keras_checkpoints / rel) as f:
            assert "optimizer_weights" not in f and "model_weights" not in f, rel
            assert list(f.attrs["layer_names"]) == e["layer_names"], rel


def test_tf_checkpoint_dir(keras_checkpoints, manifest):
    entries = _of_format(manifest, "tf-checkpoint")
    assert sorted(entries) == ["k3/tfckpt/ckpt-1", "k3/tfckpt/ckpt-2"]
    d = keras_checkpoints / "k3" / "tfckpt"
    assert (d / "ckpt-2.index").is_file()
    assert list(d.glob("ckpt-2.data-*-of-*"))
    assert 'model_checkpoint_path: "ckpt-2"' in (d / "checkpoint").read_text()


def test_savedmodels(keras_checkpoints, manifest):
    entries = _of_format(manifest, "savedmodel")
    assert (keras_checkpoints / "tfk/savedmodel/keras_metadata.pb").is_file()
    assert not (keras_checkpoints / "k3/export/sm/keras_metadata.pb").exists()
    assert not entries["k3/export/sm"]["has_optimizer_state"]


def test_csv_logs_have_one_zero_based_row_per_epoch(keras_checkpoints, manifest):
    runs: dict[Path, dict[int, dict]] = defaultdict(dict)
    for rel, e in manifest.items():
        if e["epoch"] is not None:
            runs[(keras_checkpoints / rel).parent][e["epoch"]] = e["metrics"]
    assert len(runs) == 3
    for run_dir, by_epoch in runs.items():
        with open(run_dir / "training.log", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [int(r["epoch"]) for r in rows] == list(range(len(by_epoch))), run_dir
        for r in rows:  # CSV row epoch e <-> checkpoint {epoch} = e + 1
            metrics = by_epoch[int(r["epoch"]) + 1]
            assert set(r) == {"epoch", *metrics}, run_dir
            assert float(r["val_loss"]) == pytest.approx(metrics["val_loss"], rel=1e-6)


def test_conftest_does_not_import_tensorflow():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import tests.conftest, tests.support; "
        "bad = {'tensorflow', 'keras', 'tf_keras'} & set(sys.modules); assert not bad, bad"
    )
    repo = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", code, repo], check=True, timeout=60)
