"""Load a checkpoint (and its inference artifact) with Keras, in a child process, and compare
their predictions on a fixed random input: `ckpt verify --load`.

    python -m ckpt_daemon.children.keras_load_probe keras|tf_keras CHECKPOINT [ARTIFACT]

Before it starts, the parent refuses what the stored configs give away without Keras
(`children.load_precheck`). What the child runs, in order: Keras imported; each file staged
privately, in the sandbox (`children.unprivileged`); each staged config read (never loaded) and
the file refused if loading would run its code (a `Lambda` layer, a custom object, a function
reference: `core.model_code`); then `load_model(compile=False)` (Keras 3: `safe_mode=True`) and
`predict` on the fixed input. Prints one JSON object: {"loaded": true,
"outputs": N, "identical": true|false|null, "max_abs_diff": float|null, "sandbox": "sandboxed:
..."}, {"refused": ["layer 'f' (Lambda): ...", ...], "sandbox": ...} or {"error": "..."}. It
runs only as a child process: the daemon and the CLI never import Keras themselves.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from . import load_precheck, protocol, unprivileged

TIMEOUT_SECONDS = 600.0


def probe(library: str, paths: list[Path], *, mode: str = "require") -> dict[str, Any]:
    """The parent's side (`unprivileged.run_probe`): `paths` are a checkpoint, maybe its
    inference artifact."""
    refused = load_precheck.refusals(paths)
    if refused:  # what the child would refuse, found without importing Keras
        return {"refused": refused}
    cmd = [*python_module("children.keras_load_probe"), library, *map(str, paths)]
    return unprivileged.run_probe(cmd, paths, TIMEOUT_SECONDS, mode=mode)


def load(keras: Any, path: str) -> Any:
    """`load_model(compile=False)`, in safe mode where the library has one for the format
    (refusals were checked before: `load_precheck.staged_refusals`)."""
    if keras.__name__ == "keras" or path.endswith(".keras"):
        return keras.models.load_model(path, compile=False, safe_mode=True)
    return keras.models.load_model(path, compile=False)  # tf-keras .h5: no safe mode at all


def start(library: str) -> tuple[Any, Any]:
    """A Keras child's libraries: numpy, and `library` (keras or tf_keras), TensorFlow quiet."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with contextlib.suppress(ImportError):
        import hdf5plugin  # noqa: F401 - zstd-compressed files need its filters registered
    import numpy as np

    return np, importlib.import_module(library)


def inputs(model: Any, np: Any) -> list[Any]:
    rng = np.random.default_rng(0)
    batch = []
    for tensor in model.inputs:
        shape = (2, *[d or 1 for d in tuple(tensor.shape)[1:]])
        dtype = str(getattr(tensor, "dtype", "float32"))
        if "int" in dtype:
            batch.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            batch.append(rng.standard_normal(shape).astype("float32"))
    return batch


def outputs(model: Any, feed: list[Any], np: Any) -> list[Any]:
    out = model.predict(feed if len(feed) > 1 else feed[0], verbose=0)
    return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]


def compare(expected: list[Any], got: list[Any], np: Any) -> dict[str, Any]:
    """Two models' outputs on the same input: bit-identical?, and how far apart at most."""
    pairs = list(zip(expected, got, strict=False))
    return {
        "identical": len(got) == len(expected) and all(np.array_equal(a, b) for a, b in pairs),
        "max_abs_diff": max((float(np.max(np.abs(a - b))) for a, b in pairs), default=0.0),
    }


def main(argv: list[str]) -> int:
    ok = len(argv) in (2, 3) and argv[0] in ("keras", "tf_keras")
    usage = "keras_load_probe keras|tf_keras CKPT [ARTIFACT]"
    return protocol.answer(ok, usage, lambda: _answer(argv[0], argv[1:]))


def _answer(library: str, paths: list[str]) -> dict[str, Any]:
    np, keras = start(library)
    staged = unprivileged.stage(paths)
    confined = unprivileged.confinement()
    refused = [
        f"{named}: {why}"
        for named, copy in zip(paths, staged, strict=True)
        for why in load_precheck.staged_refusals(keras, copy)
    ]
    if refused:
        return {"refused": refused, "sandbox": confined}
    model = load(keras, staged[0])
    feed = inputs(model, np)
    first = outputs(model, feed, np)
    result: dict[str, Any] = {
        "loaded": True,
        "outputs": len(first),
        "identical": None,
        "max_abs_diff": None,
        "sandbox": confined,
    }
    if len(staged) == 2:
        result |= compare(first, outputs(load(keras, staged[1]), feed, np), np)
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
