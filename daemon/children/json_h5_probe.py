"""Check a json+h5 export in a child process: the architecture from `<stem>.json`
(`model_from_json`) with the weights of `<stem>.weights.h5` (`load_weights`) must predict
bit-identically to the full checkpoint (`load_model`), on the fixed random input of
`keras_load_probe`.

    python -m ckpt_daemon.children.json_h5_probe keras|tf_keras CKPT CONFIG.json WEIGHTS

Before anything is loaded, as `keras_load_probe` does: the three files staged privately, in the
sandbox (`children.unprivileged`), and both configs (the checkpoint's, and the JSON with its
compile config: `model_from_json` compiles) refused if loading would run the file's code.
Prints one JSON object: {"identical": true|false, "max_abs_diff": float, "outputs": N,
"sandbox": "..."}, {"refused": [...]} or {"error": "..."}. Only ever a child: the daemon and the
CLI never import Keras.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

from .. import python_module
from ..core.errors import ArtifactMismatch
from . import load_precheck, protocol, unprivileged
from .keras_load_probe import compare, inputs, load, outputs, start

TIMEOUT_SECONDS = 600.0


def check(
    library: str, checkpoint: Path, config: Path, weights: Path, *, mode: str = "require"
) -> str:
    """The parent's side: raise ArtifactMismatch unless the export predicts identically
    (`mode`: `load_sandbox`; Refused where the sandbox is required and missing). Returns what
    the child ran under (`unprivileged.confinement`)."""
    paths = [checkpoint, config, weights]
    cmd = [*python_module("children.json_h5_probe"), library, *map(str, paths)]
    result: dict[str, Any] = {"refused": load_precheck.refusals(paths[:2], with_compile=True)}
    if not result["refused"]:  # else what the child would refuse, found without importing Keras
        result = unprivileged.run_probe(cmd, paths, TIMEOUT_SECONDS, mode=mode)
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


def main(argv: list[str]) -> int:
    ok = len(argv) == 4 and argv[0] in ("keras", "tf_keras")
    usage = "json_h5_probe keras|tf_keras CKPT JSON WEIGHTS"
    return protocol.answer(ok, usage, lambda: _answer(argv[0], argv[1:]))


def _answer(library: str, paths: list[str]) -> dict[str, Any]:
    warnings.simplefilter("ignore")  # model_from_json compiles: "skipping optimizer variables"
    np, keras = start(library)
    checkpoint, config, weights = unprivileged.stage(paths)
    confined = unprivileged.confinement()
    refused = [f"{paths[0]}: {why}" for why in load_precheck.staged_refusals(keras, checkpoint)]
    refused += [
        f"{paths[1]}: {why}"
        for why in load_precheck.staged_refusals(keras, config, with_compile=True)
    ]
    if refused:
        return {"refused": refused, "sandbox": confined}
    full = load(keras, checkpoint)
    feed = inputs(full, np)
    expected = outputs(full, feed, np)
    model = keras.models.model_from_json(Path(config).read_text())
    model.load_weights(weights)
    got = outputs(model, feed, np)
    return {"sandbox": confined, "outputs": len(got), **compare(expected, got, np)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
