"""Refusals found before a load child starts: the stored configs checked with no Keras imported.

A load child (`keras_load_probe`, `json_h5_probe`) imports TensorFlow and Keras first (seconds
of CPU each), then refuses a file whose config would run its code, judging class names against
the imported Keras (`unprivileged.refusals`). Most hostile files give themselves away without
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
from pathlib import Path

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
            raw = _stored_config(path)
            doc = None if raw is None else json.loads(raw)
        except (CkptError, OSError, ValueError):
            continue
        if isinstance(doc, dict) and not (with_compile and path.suffix == ".json"):
            doc.pop("compile_config", None)
        found += [f"{path}: {why}" for why in code_in_config(doc)]
    return found


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
