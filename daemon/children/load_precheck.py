"""Whether loading a Keras file would run its code, judged from its stored config alone: before a
load child starts, with no Keras imported (`refusals`), and in the child on its private copy,
against the Keras it imported (`staged_refusals`).

A load child (`keras_load_probe`, `json_h5_probe`) imports TensorFlow and Keras first (seconds
of CPU each), then refuses a file whose config would run its code, judging class names against
the imported Keras. Most hostile files give themselves away without
Keras: a `Lambda`, a function reference, a custom object's module (`core.model_code` with no
`known` test). Each refusal found here is one the child would find too (the child's test only
adds the check of unknown class names), so when there is one the child is never started: the
answer is the same, without the import. A file found clean here still goes to the child, which
checks everything again on its private copy. Reading a config never runs libhdf5 in this
process: a legacy `.h5` file's config is read by `children.config_child`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import CkptError
from ..core.model_code import code_in_config
from ..formats import model_config
from ..formats.keras_v3 import MAX_JSON_BYTES
from ..fs import beneath
from . import config_child


def refusals(paths: list[Path], *, with_compile: bool = False) -> list[str]:
    """`PATH: why` for each finding in the configs of `paths` (a `.json` export's counting its
    compile config when `with_compile`: `model_from_json` compiles). A config that cannot be
    read here is left to the child, which reads it again and says why."""
    found: list[str] = []
    for path in paths:
        try:
            doc = _doc(_stored_config(path), with_compile and path.suffix == ".json")
        except (CkptError, OSError, ValueError):
            continue
        found += [f"{path}: {why}" for why in code_in_config(doc)]
    return found


def staged_refusals(keras: object, path: str, *, with_compile: bool = False) -> list[str]:
    """The child's side: why loading the staged `path` with `keras` (the imported module) would
    run the file's code, from its stored config: `.keras` `config.json`, a legacy `.h5`
    `model_config`, or a `.json` export. `with_compile`: the compile config counts too
    (`model_from_json` compiles; `load_model(compile=False)` never reads it)."""
    staged = Path(path)
    if path.endswith(".json"):
        raw: bytes | None = staged.read_bytes()
    elif model_config.is_archive(staged):
        raw = model_config.archive_config(staged)
    else:
        raw = model_config.h5_config(staged)
    if raw is None:
        return []
    return code_in_config(_doc(raw, with_compile), known=_known_to(keras))


def _doc(raw: bytes | None, with_compile: bool) -> Any:
    """The stored config, its compile config left out unless `with_compile`."""
    doc = None if raw is None else json.loads(raw)
    if isinstance(doc, dict) and not with_compile:
        doc.pop("compile_config", None)
    return doc


def _stored_config(path: Path) -> bytes | None:
    if path.suffix == ".json":
        with os.fdopen(beneath.open_regular(path, None), "rb") as raw:
            data = raw.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            return None
        return data
    if model_config.is_archive(path):
        return model_config.archive_config(path)
    return config_child.stored_config(path)


_NAMESPACES = (
    "layers",
    "models",
    "initializers",
    "regularizers",
    "constraints",
    "optimizers",
    "losses",
    "metrics",
    "activations",
    "mixed_precision",
)


def _known_to(keras: object) -> Callable[[str], bool]:
    spaces = [getattr(keras, n) for n in _NAMESPACES if hasattr(keras, n)]
    schedules = getattr(getattr(keras, "optimizers", None), "schedules", None)
    spaces += [keras, schedules] if schedules is not None else [keras]

    def known(class_name: str) -> bool:
        if class_name in ("Functional", "Sequential", "Model"):
            return True
        if not class_name.isidentifier() or class_name.startswith("_"):
            return False
        return any(isinstance(_public(s, class_name), type) for s in spaces)

    return known


def _public(space: object, name: str) -> object:
    try:
        return getattr(space, name, None)
    except Exception:  # a lazy attribute that would import: not a class we know
        return None
