"""An adapter's lineage: the base model a PEFT adapter was trained on, found on this machine.

The adapter's `adapter_config.json` names its base (`base_model_name_or_path`, `revision`;
`formats.peft_adapter`). Here that name is linked to a folder of ours when there is one: a local
path that exists (and the checkpoint the catalog has at it, if it is inside a root), or, for a
hub name (`org/model`), a model folder catalogued in a root whose path ends with that name (its
last part at least: `.../models/tiny-bert` for `tiny-bert` or `someone/tiny-bert`). A base that
is named nowhere (peft writes None for a model built from a config: huggingface/peft#1567) or a
local path that no longer exists is `missing`, with why: such an adapter cannot be loaded until
its base is found. Read when asked (`ckpt show`, `ckpt describe`): the base may be saved,
moved or deleted after the adapter was indexed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path, PurePosixPath
from typing import Any

from ..catalog.store import Store
from ..core.errors import NotFound
from ..core.model import Checkpoint, Format, Kind
from ..core.query import ListQuery
from ..settings.config import Config


def adapter_of(c: Checkpoint) -> dict[str, Any] | None:
    """The adapter config facts the reader stored, or None for a checkpoint that is no adapter."""
    if c.kind != Kind.ADAPTER.value:
        return None
    found = (c.details.get("training_config") or {}).get("adapter")
    return found if isinstance(found, dict) else {}


def with_lineage(config: Config, store: Store, c: Checkpoint) -> Checkpoint:
    """`c` with `details["base_model"]` (`base_of`) when it is an adapter."""
    base = base_of(config, store, c)
    if base is not None:
        c.details["base_model"] = base
    return c


def base_of(config: Config, store: Store, c: Checkpoint) -> dict[str, Any] | None:
    """`{name, revision, path, checkpoint_id, in_root, missing}` of adapter `c`'s base model
    (None for a checkpoint that is no adapter). `path`: the base's folder here, if found;
    `missing`: why it is not (None when it is, or when it is a hub name not saved here)."""
    adapter = adapter_of(c)
    if adapter is None:
        return None
    name = adapter.get("base_model_name_or_path")
    base: dict[str, Any] = {
        "name": name,
        "revision": adapter.get("revision"),
        "path": None,
        "checkpoint_id": None,
        "in_root": False,
        "missing": None,
    }
    if not name:
        base["missing"] = (
            "adapter_config.json names no base model (base_model_name_or_path is empty): "
            "the adapter cannot be loaded until its base is known"
        )
        return base
    if _is_local(name):
        local = _local_path(name, Path(c.path))
        if local is None:
            base["missing"] = f"the base model folder {name} does not exist (moved or deleted?)"
            return base
        return {**base, **_linked(config, store, local)}
    found = _by_name(store, name, c.id)
    if found is not None:
        base.update(path=found.path, checkpoint_id=found.id, in_root=True)
    return base


def _is_local(name: str) -> bool:
    """A path as peft writes one for a local base (`from_pretrained("/data/llama")`, `./base`),
    not a hub repo id (`org/model`, `model`)."""
    return os.path.isabs(name) or name.startswith(("./", "../", "~")) or name.count("/") > 1


def _local_path(name: str, adapter: Path) -> Path | None:
    """The folder a local base name is now: absolute as written, or relative to the adapter's
    folder or one above it (the training script's working folder is unknown)."""
    expanded = Path(os.path.expanduser(name))
    candidates = [expanded] if expanded.is_absolute() else [p / expanded for p in adapter.parents]
    return next((p for p in candidates if p.is_dir()), None)


def _linked(config: Config, store: Store, folder: Path) -> dict[str, Any]:
    path = os.path.normpath(folder)
    root = config.root_for(Path(path))
    found: dict[str, Any] = {"path": path, "in_root": root is not None}
    if root is not None:
        with contextlib.suppress(NotFound):  # in a root, not catalogued (yet)
            found["checkpoint_id"] = store.get(path).id
    return found


def _by_name(store: Store, name: str, adapter_id: int) -> Checkpoint | None:
    """The catalogued HF model folder whose path ends with the hub name `name` (all its parts
    first, else its last part), never an adapter; the newest when several do."""
    parts = PurePosixPath(name).parts
    rows = store.list(
        ListQuery(format=Format.HF_FOLDER.value, off_disk=False, versions=False, descending=True)
    )
    models = [r for r in rows if r.id != adapter_id and r.kind != Kind.ADAPTER.value]
    for tail in (parts, parts[-1:]):
        matches = [r for r in models if Path(r.path).parts[-len(tail) :] == tail]
        if matches:
            return matches[0]
    return None
