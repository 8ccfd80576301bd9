"""Load a folder checkpoint with the library that wrote it, in a child process: `ckpt verify
--load` for an Orbax step folder (jax + orbax-checkpoint) and a torch.distributed.checkpoint
(DCP) folder (torch).

    python -m ckpt_daemon.children.folder_load_probe orbax|dcp FOLDER

What it runs, in order: the libraries imported; the folder staged privately (no symlink
followed, so what is checked is what is loaded), in the sandbox (`children.unprivileged`); then:
- Orbax: each item folder holding `_METADATA` (not `metrics`, not Keras' `model_config`)
  restored with `orbax.checkpoint.PyTreeCheckpointer().restore` on the CPU;
- DCP: the staged `.metadata` judged from its opcodes and refused when it names or calls a
  global outside `dcp_folder.ALLOWED` (`dcp_folder.foreign_globals`); else built by
  `dcp_folder.load_metadata` (an unpickler that imports only those) and handed to DCP's reader,
  which never unpickles it itself; then the folder loaded as `dcp_to_torch_save` does (one
  process, no process group; DCP reads non-tensor values with `torch.load(weights_only=True)`).
Prints one JSON object: {"arrays": {name: shape}, "sandbox": "..."}, {"refused": "..."},
{"missing": "jax/orbax"} (not importable here) or {"error": "..."}.
It runs only as a child process: the daemon and the CLI never import jax or torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from ..formats import dcp_folder, orbax_step
from . import protocol, unprivileged

TIMEOUT_SECONDS = 300.0
_NOT_TREES = (orbax_step.METRICS_ITEM, "model_config")
_LIBRARIES = {"orbax": ("jax", "orbax.checkpoint"), "dcp": ("torch",)}


def probe(kind: str, folder: Path, *, mode: str = "require") -> dict[str, Any]:
    """The parent's side (`unprivileged.run_probe`)."""
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


def _dcp(modules: dict[str, Any], staged: str, data: bytes) -> dict[str, list[int]]:
    from .torch_load_probe import flat

    torch = modules["torch"]
    filesystem = importlib.import_module("torch.distributed.checkpoint.filesystem")
    planner = importlib.import_module("torch.distributed.checkpoint.default_planner")
    loader = importlib.import_module("torch.distributed.checkpoint.state_dict_loader")

    class Reader(filesystem.FileSystemReader):  # type: ignore[name-defined]
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            metadata: Any = dcp_folder.load_metadata(data)  # never DCP's own `pickle.load`
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = filesystem.StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    state: dict[str, Any] = {}
    loader._load_state_dict(
        state,
        storage_reader=Reader(staged),
        planner=planner._EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    return {name: [int(d) for d in t.shape] for name, t in flat(torch, state).items()}


def main(argv: list[str]) -> int:
    usage = "folder_load_probe orbax|dcp FOLDER"
    return protocol.answer(len(argv) == 2 and argv[0] in _LIBRARIES, usage, lambda: _answer(*argv))


def _answer(kind: str, folder: str) -> dict[str, Any]:
    unprivileged.torch_weights_only(os.environ)
    try:
        modules = {name: importlib.import_module(name) for name in _LIBRARIES[kind]}
    except ImportError:
        return {"missing": "/".join(n.split(".")[0] for n in _LIBRARIES[kind])}
    staged = unprivileged.stage_folder(folder)
    confined = unprivileged.confinement()
    if kind == "orbax":
        return {"arrays": _orbax(modules, staged), "sandbox": confined}
    data = Path(staged, dcp_folder.METADATA).read_bytes()  # judged, then built: read once
    foreign = dcp_folder.foreign_globals(data)
    if foreign:
        refused = f".metadata names {', '.join(foreign[:5])}"  # as the parent says
        return {"refused": refused, "sandbox": confined}
    return {"arrays": _dcp(modules, staged, data), "sandbox": confined}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
