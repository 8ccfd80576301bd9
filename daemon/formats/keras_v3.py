"""Keras 3 native files: `.keras` zip archives and `.weights.h5` weight stores.

The archive's `model.weights.h5` is STORED,
so h5py reads it through a window onto the outer file: no extraction, no copy.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Any

import h5py

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo
from . import hdf5, keras_config, keras_h5
from .keras_config import LayerConfig
from .window import open_member, read_member

WEIGHTS_MEMBER = "model.weights.h5"
CONFIG_MEMBER = "config.json"
METADATA_MEMBER = "metadata.json"
MAX_JSON_BYTES = 16 << 20  # config.json of a 10,000-layer model is ~10 MB


def is_weights_store(f: h5py.File) -> bool:
    return any(hdf5.member(f, key) is not None for key in ("layers", "optimizer", "vars"))


def read_weights_file(f: h5py.File) -> CheckpointInfo:
    """A `.weights.h5`: no architecture, but optimizer state whenever the model was compiled."""
    store = _layers(f, [])
    total, n_trainable = store.count_params()
    optimizer = _optimizer(f)
    notes = ["weights only: build the model in code, then load_weights()"]
    if optimizer is not None:
        notes.append("includes optimizer state (Keras 3 save_weights keeps it when compiled)")
    return CheckpointInfo(
        format=Format.KERAS_WEIGHTS_H5,
        kind=Kind.WEIGHTS,
        model_name=_model_name(f),
        layers=tuple(store.layers),
        n_params=total,
        n_trainable_params=n_trainable,
        weights_bytes=_model_bytes(f),
        optimizer=optimizer,
        notes=tuple(notes),
    )


def read_archive(archive: zipfile.ZipFile, raw: IO[bytes]) -> CheckpointInfo:
    """A `.keras` zip: architecture and compile config from JSON, the rest from the weights."""
    names = set(archive.namelist())
    if CONFIG_MEMBER not in names or WEIGHTS_MEMBER not in names:
        missing = [m for m in (CONFIG_MEMBER, WEIGHTS_MEMBER) if m not in names]
        raise CorruptCheckpoint(f"zip archive without {', '.join(missing)}: not a Keras archive")
    config = _json_member(archive, CONFIG_MEMBER)
    metadata = _json_member(archive, METADATA_MEMBER) if METADATA_MEMBER in names else {}
    configs = keras_config.top_level_layers(config)
    with open_member(archive, raw, WEIGHTS_MEMBER) as window, hdf5.open_h5(window) as f:
        outside = hdf5.survey(f)
        store = _layers(f, configs)
        optimizer = _optimizer(f)
        weights_bytes = _model_bytes(f)
    total, n_trainable = store.count_params()
    compile_config = config.get("compile_config") if isinstance(config, dict) else None
    optimizer = _with_compile_config(optimizer, compile_config)
    model_class, model_name = keras_config.model_identity(config)
    return CheckpointInfo(
        format=Format.KERAS_ZIP,
        kind=Kind.FULL,
        model_class=model_class,
        model_name=model_name,
        keras_version=metadata.get("keras_version") if isinstance(metadata, dict) else None,
        layers=tuple(store.layers),
        n_params=total,
        n_trainable_params=n_trainable,
        weights_bytes=weights_bytes,
        optimizer=optimizer,
        training_config=_training_config(compile_config),
        notes=tuple(_archive_notes(optimizer, compile_config))
        + ((hdf5.outside_note(outside),) if outside else ()),
    )


def _json_member(archive: zipfile.ZipFile, name: str) -> Any:
    try:
        return json.loads(read_member(archive, name, MAX_JSON_BYTES))
    except (ValueError, RecursionError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise CorruptCheckpoint(f"{name} in the archive is unreadable: {exc}") from exc


@dataclass(frozen=True)
class _StoreLayers:
    layers: list[Layer]
    trainable: dict[str, bool]  # layer name → its config's trainable flag
    keys: dict[str, str]  # layer name → its group key under /layers

    def count_params(self) -> tuple[int, int]:
        return keras_config.count_params(self.layers, self.trainable, self.keys)


def _layers(f: h5py.File, configs: list[LayerConfig]) -> _StoreLayers:
    """One Layer per group under /layers (nested models included whole), in model order."""
    group = hdf5.member(f, "layers")
    if not isinstance(group, h5py.Group):
        return _StoreLayers([], {}, {})
    by_key = keras_config.weights_store_keys(configs)
    by_name = {c.name: c for c in configs}
    found: list[tuple[int, Layer]] = []
    trainable: dict[str, bool] = {}
    keys: dict[str, str] = {}
    for key, layer_group in hdf5.members(group):
        name = _recorded_name(layer_group) or (by_key[key].name if key in by_key else key)
        config = by_name.get(name) or by_key.get(key)
        weights = tuple(hdf5.weight_info(path, d) for path, d in hdf5.datasets(layer_group))
        n_params = sum(hdf5.n_elements(w.shape) for w in weights)
        layer = Layer(name, config.class_name if config else None, n_params, weights)
        found.append((configs.index(config) if config else len(configs), layer))
        trainable[name] = config.trainable if config else True
        keys[name] = key
    found.sort(key=lambda pair: pair[0])
    return _StoreLayers([layer for _i, layer in found], trainable, keys)


def _recorded_name(layer_group: Any) -> str | None:
    variables = hdf5.member(layer_group, "vars") if isinstance(layer_group, h5py.Group) else None
    return hdf5.attr_text(variables, "name") if isinstance(variables, h5py.Group) else None


def _model_bytes(f: h5py.File) -> int:
    total = 0
    for key in ("layers", "vars"):
        group = hdf5.member(f, key)
        if isinstance(group, h5py.Group):
            total += sum(hdf5.nbytes(d) for _n, d in hdf5.datasets(group))
    return total


def _model_name(f: h5py.File) -> str | None:
    group = hdf5.member(f, "vars")
    return hdf5.attr_text(group, "name") if isinstance(group, h5py.Group) else None


def _optimizer(f: h5py.File) -> OptimizerInfo | None:
    """`/optimizer/vars/0` is the iteration count, `1` the learning rate unless it is a schedule."""
    variables = hdf5.member(f, "optimizer/vars")
    if not isinstance(variables, h5py.Group) or len(variables) == 0:
        return None
    state = keras_h5.optimizer_state(variables)
    first, second = hdf5.member(variables, "0"), hdf5.member(variables, "1")
    iterations = hdf5.read_scalar(first) if isinstance(first, h5py.Dataset) else None
    learning_rate = hdf5.read_scalar(second) if isinstance(second, h5py.Dataset) else None
    return OptimizerInfo(
        class_name=None,
        name=hdf5.attr_text(variables, "name"),
        iterations=int(iterations) if isinstance(iterations, int) else None,
        learning_rate=learning_rate if isinstance(learning_rate, float) else None,
        n_variables=state.n_variables,
        state_bytes=state.state_bytes,
    )


def _with_compile_config(
    optimizer: OptimizerInfo | None, compile_config: Any
) -> OptimizerInfo | None:
    opt_config = compile_config.get("optimizer") if isinstance(compile_config, dict) else None
    class_name, config = keras_config.optimizer_class(opt_config)
    if optimizer is None:
        if class_name is None:
            return None
        optimizer = OptimizerInfo(class_name=None)
    return keras_config.with_optimizer_config(optimizer, class_name, config)


def _training_config(compile_config: Any) -> dict[str, Any] | None:
    if not isinstance(compile_config, dict):
        return None
    return {k: v for k, v in compile_config.items() if k != "optimizer"}


def _archive_notes(optimizer: OptimizerInfo | None, compile_config: Any) -> list[str]:
    has_state = optimizer is not None and optimizer.n_variables > 0
    has_config = isinstance(compile_config, dict) and bool(compile_config.get("optimizer"))
    if has_state and not has_config:
        return [
            "resume: unreliable - the compile config lost its optimizer (Keras bug after an .h5 "
            "save in the same process): load_model() builds a default RMSprop and skips the "
            "saved optimizer state"
        ]
    if has_state:
        return ["resume: yes - optimizer state and compile config present"]
    if compile_config is None:
        return ["resume: no - no compile config and no optimizer state (inference artifact)"]
    return ["resume: no - no optimizer state in the file"]
