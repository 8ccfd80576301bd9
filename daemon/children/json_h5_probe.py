"""Check a json+h5 export in a child process: the architecture from `<stem>.json`
(`model_from_json`) with the weights of `<stem>.weights.h5` (`load_weights`) must predict
bit-identically to the full checkpoint (`load_model`), on the fixed random input of
`keras_load_probe`.

    python -m ckpt_daemon.children.json_h5_probe keras|tf_keras CKPT CONFIG.json WEIGHTS

Before anything is loaded, as `keras_load_probe` does (`children.unprivileged`): the three files
staged privately in the sandbox (`children.sandbox`: no network, no write outside that folder),
and both configs (the checkpoint's, and the JSON with its compile config: `model_from_json`
compiles) refused if loading would run the file's code. Prints one JSON object: {"identical":
true|false, "max_abs_diff": float, "outputs": N, "sandbox": "..."}, {"refused": [...]} or
{"error": "..."}. Only
ever a child: the daemon and the CLI never import Keras.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from .. import python_module
from ..core.errors import ArtifactMismatch
from . import load_precheck, unprivileged
from .keras_load_probe import _inputs, load

TIMEOUT_SECONDS = 600.0


def check(
    library: str, checkpoint: Path, config: Path, weights: Path, *, mode: str = "require"
) -> str:
    """The parent's side: raise ArtifactMismatch unless the export predicts identically
    (`mode`: `load_sandbox`; Refused where the sandbox is required and missing). Returns what
    the child ran under (`unprivileged.confinement`)."""
    refused = load_precheck.refusals([checkpoint, config], with_compile=True)
    if refused:  # what the child would refuse, found without importing Keras
        reasons = "; ".join(refused)
        raise ArtifactMismatch(f"json+h5 export not checked: load refused, nothing run: {reasons}")
    cmd = [
        *python_module("children.json_h5_probe"),
        library,
        *map(str, (checkpoint, config, weights)),
    ]
    result = unprivileged.run_probe(cmd, [checkpoint, config, weights], TIMEOUT_SECONDS, mode=mode)
    if "refused" in result:
        reasons = "; ".join(str(r) for r in result["refused"])
        raise ArtifactMismatch(f"json+h5 export not checked: load refused, nothing run: {reasons}")
    if "error" in result:
        raise ArtifactMismatch(f"json+h5 export does not load with {library}: {result['error']}")
    if not result["identical"]:
        raise ArtifactMismatch(
            f"json+h5 export predicts differently from {checkpoint} "
            f"(max abs diff {result['max_abs_diff']})"
        )
    return str(result.get("sandbox") or "")


def _outputs(model: Any, feed: list[Any], np: Any) -> list[Any]:
    out = model.predict(feed if len(feed) > 1 else feed[0], verbose=0)
    return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("keras", "tf_keras"):
        print(
            "usage: python -m ckpt_daemon.children.json_h5_probe keras|tf_keras CKPT JSON WEIGHTS",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with contextlib.suppress(ImportError):
        import hdf5plugin  # noqa: F401 - zstd-compressed files need its filters registered
    import numpy as np

    warnings.simplefilter("ignore")  # model_from_json compiles: "skipping optimizer variables"
    try:
        keras = importlib.import_module(argv[0])
        checkpoint, config, weights = unprivileged.stage(argv[1:])
        confined = unprivileged.confinement()
        refused = [f"{argv[1]}: {why}" for why in unprivileged.refusals(keras, checkpoint)]
        refused += [
            f"{argv[2]}: {why}" for why in unprivileged.refusals(keras, config, with_compile=True)
        ]
        if refused:
            print(json.dumps({"refused": refused, "sandbox": confined}))
            return 0
        full = load(keras, checkpoint)
        feed = _inputs(full, np)
        expected = _outputs(full, feed, np)
        model = keras.models.model_from_json(Path(config).read_text())
        model.load_weights(weights)
        got = _outputs(model, feed, np)
        result: dict[str, Any] = {
            "sandbox": confined,
            "outputs": len(got),
            "identical": len(got) == len(expected)
            and all(np.array_equal(a, b) for a, b in zip(expected, got, strict=False)),
            "max_abs_diff": max(
                (float(np.max(np.abs(a - b))) for a, b in zip(expected, got, strict=False)),
                default=0.0,
            ),
        }
    except Exception as exc:  # the report says why it does not load
        text = str(exc).strip().splitlines()
        result = {"error": f"{type(exc).__name__}: {text[0] if text else ''}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
