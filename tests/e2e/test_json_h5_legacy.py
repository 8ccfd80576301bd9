"""`ckpt split --layout json+h5` of a legacy tf-keras `.h5` full model (issue 20, item 8): the
original Keras serialization case, an architecture as JSON and weights in HDF5, rebuilt with
`model_from_json` + `load_weights`.

The weights file is in the layout `save_weights("x.h5")` writes (`layer_names`, `backend`,
`keras_version` at the root, one group per layer with `weight_names`). The product checks the
export in its own child; here tf-keras (`model_from_json` + `load_weights`) and Keras 3
(`load_weights` into the model it loads from the checkpoint, weights zeroed first) each read
it (both in one child of the test) and must predict bit-identically to the checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import h5py

from tests.support import forked_python
from tests.support.workspace import Workspace

TFK_H5 = "tfk/run_h5/weights.01-1.69.hdf5"
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
}
# argv: checkpoint, config.json, weights, then libs: prints, for each lib, whether the export
# predicts identically (tf-keras and Keras 3 side by side: TensorFlow starts once for both).
READS_IT = r"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
checkpoint, config, weights = sys.argv[1:4]
same = {}
for lib in sys.argv[4:]:
    if lib == "tf_keras":
        import tf_keras as keras
    else:
        import keras
    x = np.random.default_rng(7).standard_normal((5, 8)).astype("float32")
    reference = keras.models.load_model(checkpoint, compile=False)
    expected = reference.predict(x, verbose=0)
    if lib == "tf_keras":
        model = keras.models.model_from_json(open(config).read())
    else:  # Keras 3 cannot read a tf-keras config: its own model, weights zeroed, then loaded
        model = keras.models.load_model(checkpoint, compile=False)
        model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    model.load_weights(weights)
    same[lib] = bool(np.array_equal(expected, model.predict(x, verbose=0)))
print(json.dumps(same))
"""


def reads_it(checkpoint: Path, config: Path, weights: Path, *libs: str) -> dict[str, bool]:
    done = forked_python.run(
        [sys.executable, "-c", READS_IT, *map(str, (checkpoint, config, weights)), *libs],
        text=True,
        env=CHILD_ENV,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_tf_keras_h5_exports_as_json_and_legacy_weights(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    source = ws.root / "run" / "weights.01-1.69.hdf5"
    source.parent.mkdir()
    shutil.copy2(keras_checkpoints / TFK_H5, source)
    ws.run("scan")
    report = ws.json("split", "--layout", "json+h5", str(source))
    config, weights = Path(report["config"]), Path(report["weights"])
    assert (config.name, weights.name) == (
        "weights.01-1.69.json",
        "weights.01-1.69.legacy-weights.h5",
    )
    with h5py.File(source, "r") as src, h5py.File(weights, "r") as dst:
        assert config.read_bytes().decode() == src.attrs["model_config"]
        assert {"layer_names", "backend", "keras_version"} <= set(dst.attrs)
        assert list(dst.attrs["layer_names"]) == list(src["model_weights"].attrs["layer_names"])
        assert "optimizer_weights" not in dst and "model_weights" not in dst
        for name in dst.attrs["layer_names"]:
            assert "weight_names" in dst[str(name)].attrs
    assert reads_it(source, config, weights, "tf_keras", "keras") == {
        "tf_keras": True,
        "keras": True,
    }
    card = ws.run("describe", str(config)).stdout
    assert "model_from_json" in card and "legacy-weights.h5" in card
    listed = {Path(c["path"]).name for c in ws.json("list")}
    assert listed == {source.name}  # the export's files are artifacts, not checkpoints


def test_a_keras3_legacy_h5_is_refused_with_the_reason(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    source = ws.root / "run" / "full.h5"
    source.parent.mkdir()
    shutil.copy2(keras_checkpoints / "k3/legacy/full.h5", source)
    ws.run("scan")
    refused = ws.run("split", "--layout", "json+h5", str(source), check=False)
    assert refused.returncode == 2
    assert "written by Keras 3" in refused.stderr and "model_from_json" in refused.stderr
    assert not source.with_suffix(".json").exists()
