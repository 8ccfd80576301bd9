"""Load a folder checkpoint with the library that wrote it, in a child process: `ckpt verify
--load` for an Orbax step folder (jax + orbax-checkpoint) and a torch.distributed.checkpoint
(DCP) folder (torch).

    python -m ckpt_daemon.children.folder_load_probe orbax|dcp FOLDER

What it runs, in order (`children.unprivileged`): the libraries imported; the folder copied into
the private staging folder the parent made (`stage_folder`: no symlink followed), so what is
checked is what is loaded; all of it in the sandbox (`children.sandbox`: no network, no write
outside that folder); then:
- Orbax: each item folder holding `_METADATA` (not `metrics`, not Keras' `model_config`)
  restored with `orbax.checkpoint.PyTreeCheckpointer().restore` on the CPU;
- DCP: the staged `.metadata` read again through `formats.pickle_safe` and refused when it
  names a global outside `dcp_folder.DCP_GLOBALS` (so the plain `pickle.load` that DCP's reader
  runs can only build DCP's own records), then `dcp_to_torch_save` (one process, no process
  group) into the staging folder and `torch.load(weights_only=True)` of the result.
Prints one JSON object: {"arrays": {name: shape}, "sandbox": "..."}, {"refused": "..."},
{"missing": "jax/orbax"} (not importable here) or {"error": "..."}.
It runs only as a child process: the daemon and the CLI never import jax or torch.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from ..formats import dcp_folder, orbax_step
from . import unprivileged

TIMEOUT_SECONDS = 300.0
_NOT_TREES = (orbax_step.METRICS_ITEM, "model_config")
_LIBRARIES = {"orbax": ("jax", "orbax.checkpoint"), "dcp": ("torch",)}


def probe(kind: str, folder: Path, *, mode: str = "require") -> dict[str, Any]:
    """The parent's side: the child's JSON answer, or {"error": ...} when it gave none
    (`mode`: `load_sandbox`)."""
    cmd = [*python_module("children.folder_load_probe"), kind, str(folder)]

    def settings(env: dict[str, str]) -> None:
        unprivileged.torch_weights_only(env)
        env |= {"JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}

    return unprivileged.run_probe(cmd, [folder], TIMEOUT_SECONDS, settings, mode=mode)


def _orbax(modules: dict[str, Any], staged: str) -> dict[str, list[int]]:
    jax, ocp = modules["jax"], modules["orbax.checkpoint"]
    arrays: dict[str, list[int]] = {}
    for item in sorted(os.listdir(staged)):
        path = os.path.join(staged, item)
        if item in _NOT_TREES or not os.path.isfile(os.path.join(path, orbax_step.ITEM_METADATA)):
            continue
        tree = ocp.PyTreeCheckpointer().restore(path)
        for keys, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if hasattr(leaf, "shape"):
                arrays[".".join(_key(k) for k in keys)] = [int(d) for d in leaf.shape]
    return arrays


def _key(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _dcp(modules: dict[str, Any], staged: str) -> dict[str, list[int]]:
    from .torch_load_probe import _flat

    torch = modules["torch"]
    utils = importlib.import_module("torch.distributed.checkpoint.format_utils")
    out = os.path.join(os.environ[unprivileged.STAGING_ENV], "loaded.pt")
    utils.dcp_to_torch_save(staged, out)
    state = torch.load(out, weights_only=True, map_location="cpu")
    return {name: [int(d) for d in t.shape] for name, t in _flat(torch, state).items()}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in _LIBRARIES:
        print("usage: python -m ckpt_daemon.children.folder_load_probe orbax|dcp FOLDER")
        return 2
    kind, folder = argv
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    try:
        modules = {name: importlib.import_module(name) for name in _LIBRARIES[kind]}
    except ImportError:
        print(json.dumps({"missing": "/".join(n.split(".")[0] for n in _LIBRARIES[kind])}))
        return 0
    try:
        staged = unprivileged.stage_folder(folder)
        confined = unprivileged.confinement()
        if kind == "dcp":
            data = Path(staged, dcp_folder.METADATA).read_bytes()
            foreign = dcp_folder.foreign_globals(data)
            if foreign:
                refused = f".metadata names {', '.join(foreign[:5])}"
                print(json.dumps({"refused": refused, "sandbox": confined}))
                return 0
            arrays = _dcp(modules, staged)
        else:
            arrays = _orbax(modules, staged)
        result: dict[str, Any] = {"arrays": arrays, "sandbox": confined}
    except Exception as exc:  # the report says why it does not load
        text = str(exc).strip().splitlines()
        result = {"error": f"{type(exc).__name__}: {text[0] if text else ''}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
