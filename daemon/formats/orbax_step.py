"""Orbax step folders: `<dir>/<step>/` with `_CHECKPOINT_METADATA` and one folder per item.

What is read (JSON only, bounded, beneath the root; never jax, orbax or tensorstore):
- `_CHECKPOINT_METADATA`: the item handlers and `commit_timestamp_nsecs` (null while in flight);
- each item's `_METADATA`: `tree_metadata`, one entry per leaf with its key path and
  `write_shape` (names and shapes; Orbax's JSON has no dtypes: those sit in the zarr records
  inside the binary OCDBT store, so none is claimed here);
- `<step>/metrics/metrics`: the metrics a `CheckpointManager` with `best_fn` stored (the
  `metrics` of `_CHECKPOINT_METADATA` stays empty);
- `commit_success.txt`: written inside the folder before the rename on local disks too, and the
  only marker where a writer saves in place (commit-file mode); older releases may omit it.

An in-flight save is `<step>.orbax-checkpoint-tmp` (older releases: `-<timestamp>` after it), at
step and at item level; a killed writer leaves it there, and a restarted manager skips it.
Leaves under `optimizer_variables` (Keras 3) or `opt_state` are optimizer state; under
`metrics_variables` the metric accumulators; the rest the model's variables.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from ..fs import beneath

STEP_METADATA = "_CHECKPOINT_METADATA"
ITEM_METADATA = "_METADATA"
COMMIT_MARKER = "commit_success.txt"
METRICS_ITEM = "metrics"
TMP_SUFFIX = ".orbax-checkpoint-tmp"
_TMP_NAME = re.compile(r"^(?P<base>.+)\.orbax-checkpoint-tmp(?:-\d+)?$")
_STEP_NAME = re.compile(r"^(?P<step>\d+)(?:\.orbax-checkpoint-tmp(?:-\d+)?)?$")
MAX_JSON_BYTES = 32 << 20
_OPTIMIZER_ROOTS = ("optimizer_variables", "opt_state", "optimizer", "optimizer_state")
_METRIC_ROOTS = ("metrics_variables",)
_UNKNOWN_DTYPE = "?"


@dataclass(frozen=True)
class Leaf:
    name: str  # the key path joined with dots: `params.dense.kernel`
    shape: tuple[int, ...] | None  # None: a scalar or a leaf without a write shape
    item: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape or ())


@dataclass(frozen=True)
class OrbaxStep:
    step: int
    in_flight: bool  # a `.orbax-checkpoint-tmp` name (step or item level)
    committed: bool  # `commit_success.txt` at step level
    commit_timestamp_ns: int | None  # None until the save is finalized
    items: tuple[str, ...]
    leaves: tuple[Leaf, ...]
    metrics: dict[str, float]
    item_bytes: dict[str, int] = field(default_factory=dict)  # bytes on disk per item folder

    @property
    def keras(self) -> bool:
        """Written by Keras 3's OrbaxCheckpoint: items `pytree` and `model_config`."""
        return "pytree" in self.items


def step_of(name: str) -> tuple[int, bool] | None:
    """(step, in flight) for a step folder's name (`12`, `12.orbax-checkpoint-tmp[-ts]`)."""
    match = _STEP_NAME.match(name)
    if match is None:
        return None
    return int(match["step"]), name != match["step"]


def is_step_folder(folder: Path) -> bool:
    """A folder named like a step that holds `_CHECKPOINT_METADATA`, or any folder with Orbax's
    in-flight name (a writer killed early leaves one without it)."""
    parsed = step_of(folder.name)
    return parsed is not None and (parsed[1] or (folder / STEP_METADATA).is_file())


def read_step(folder: Path, root: Path | None = None) -> OrbaxStep:
    parsed = step_of(folder.name)
    if parsed is None:
        raise CorruptCheckpoint(f"{folder.name!r} is not an Orbax step folder name")
    step, in_flight = parsed
    meta = _json(folder / STEP_METADATA, root)
    if not isinstance(meta, dict):
        raise CorruptCheckpoint(f"{STEP_METADATA} is not a JSON object")
    commit_ns = meta.get("commit_timestamp_nsecs")
    items, leaves, item_bytes = [], [], {}
    item_in_flight = False
    for entry in sorted(_entries(folder)):
        path = folder / entry
        if not path.is_dir() or path.is_symlink():
            continue
        tmp = _TMP_NAME.match(entry)
        item = tmp["base"] if tmp else entry
        item_in_flight |= tmp is not None
        items.append(item)
        item_bytes[item] = _bytes_below(path)
        if (path / ITEM_METADATA).is_file():
            leaves.extend(_leaves(_json(path / ITEM_METADATA, root), item))
    return OrbaxStep(
        step=step,
        in_flight=in_flight or item_in_flight,
        committed=(folder / COMMIT_MARKER).is_file(),
        commit_timestamp_ns=commit_ns if isinstance(commit_ns, int) else None,
        items=tuple(items),
        leaves=tuple(leaves),
        metrics=_metrics(folder, root),
        item_bytes=item_bytes,
    )


def info_of(orbax: OrbaxStep) -> CheckpointInfo:
    """The step as a catalog entry: the model's leaves as weights, optimizer state apart."""
    apart = (*_OPTIMIZER_ROOTS, *_METRIC_ROOTS)
    model = [leaf for leaf in orbax.leaves if _root(leaf) not in apart]
    optimizer = [leaf for leaf in orbax.leaves if _root(leaf) in _OPTIMIZER_ROOTS]
    data_items = [i for i in orbax.items if i not in (METRICS_ITEM, "model_config")]
    layer = Layer(
        name=data_items[0] if data_items else "tree",
        class_name=None,
        n_params=sum(leaf.numel for leaf in model if leaf.shape is not None),
        weights=tuple(WeightInfo(x.name, x.shape or (), _UNKNOWN_DTYPE) for x in model),
    )
    # Orbax's JSON has no dtypes: the bytes on disk of the tree's items, split between the
    # model and the optimizer by their element counts
    on_disk = sum(orbax.item_bytes.get(i, 0) for i in data_items)
    model_n = sum(x.numel for x in model if x.shape is not None)
    opt_n = sum(x.numel for x in optimizer if x.shape is not None)
    opt_bytes = on_disk * opt_n // (model_n + opt_n) if model_n + opt_n else 0
    opt = None
    if optimizer:
        # Keras 3: `optimizer_variables.<the optimizer's name>.<variable>`
        names = {x.name.split(".")[1] for x in optimizer if x.name.count(".") >= 2}
        names = names if all(_root(x) == "optimizer_variables" for x in optimizer) else set()
        opt = OptimizerInfo(
            class_name=None,
            name=next(iter(names)) if len(names) == 1 else None,  # Keras: the instance name
            n_variables=len(optimizer),
            state_bytes=opt_bytes,
        )
    notes = [
        "Orbax stores no dtypes in its JSON metadata: bytes are the bytes on disk, split "
        "between model and optimizer by element count"
    ]
    if orbax.keras:
        notes.append("written by Keras 3's OrbaxCheckpoint (steps are 0-based epochs)")
    return CheckpointInfo(
        format=Format.ORBAX,
        kind=Kind.FULL if "model_config" in orbax.items else Kind.WEIGHTS,
        layers=(layer,),
        n_params=layer.n_params,
        weights_bytes=on_disk - opt_bytes,
        optimizer=opt,
        notes=tuple(notes),
        recorded={"step": orbax.step, "metrics": dict(orbax.metrics)},
    )


def _root(leaf: Leaf) -> str:
    return leaf.name.split(".", 1)[0]


def _leaves(metadata: Any, item: str) -> list[Leaf]:
    tree = metadata.get("tree_metadata") if isinstance(metadata, dict) else None
    if not isinstance(tree, dict):
        raise CorruptCheckpoint(f"{item}/{ITEM_METADATA} has no tree_metadata")
    out = []
    for key, entry in tree.items():
        if not isinstance(entry, dict):
            continue
        keys = [str(k.get("key")) for k in entry.get("key_metadata") or () if isinstance(k, dict)]
        value = entry.get("value_metadata") or {}
        if not isinstance(value, dict) or value.get("skip_deserialize"):
            continue  # an empty container (`non_trainable_variables` of a model without any)
        shape = value.get("write_shape")
        dims = tuple(d for d in shape if isinstance(d, int)) if isinstance(shape, list) else None
        out.append(Leaf(".".join(keys) or str(key), dims, item))
    return out


def _metrics(folder: Path, root: Path | None) -> dict[str, float]:
    path = folder / METRICS_ITEM / METRICS_ITEM
    if not path.is_file():
        return {}
    try:
        data = _json(path, root)
    except CorruptCheckpoint:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _json(path: Path, root: Path | None) -> Any:
    try:
        data = beneath.read_bounded(path, MAX_JSON_BYTES, root)
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{path.name} is missing") from None
    except OSError as exc:
        raise CorruptCheckpoint(f"{path.name}: {exc.strerror}") from exc
    if data is None:
        raise CorruptCheckpoint(f"{path.name} holds more than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(data)
    except RecursionError:  # the JSON decoder recurses once a level: ~1,000 at most
        raise CorruptCheckpoint(f"{path.name} is JSON nested too deep to read: refused") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(f"{path.name} is not JSON: {exc}") from exc


def _entries(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError as exc:
        raise CorruptCheckpoint(f"{folder.name}: {exc.strerror}") from exc


def _bytes_below(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total
