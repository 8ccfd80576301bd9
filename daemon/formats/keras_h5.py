"""Legacy Keras HDF5 files: full models (`model.save('x.h5')`, Keras 2 and 3) and tf-keras
`save_weights('x.h5')` weights-only files."""

from __future__ import annotations

from typing import Any

import h5py

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo
from . import hdf5, keras_config

_ITERATION_NAMES = {"iteration", "iterations"}
_LR_NAMES = {"learning_rate", "lr"}


def is_legacy(f: h5py.File) -> bool:
    return hdf5.member(f, "model_weights") is not None or "layer_names" in f.attrs


def read(f: h5py.File) -> CheckpointInfo:
    if hdf5.member(f, "model_weights") is not None:
        return _full_model(f)
    return _weights_only(f)


def _full_model(f: h5py.File) -> CheckpointInfo:
    model_config = hdf5.attr_json(f, "model_config")
    training_config = hdf5.attr_json(f, "training_config")
    configs = keras_config.top_level_layers(model_config)
    weights_group = hdf5.member(f, "model_weights")
    if not isinstance(weights_group, h5py.Group):
        raise CorruptCheckpoint("model_weights is not a group")
    layers = _layers(weights_group, {c.name: c.class_name for c in configs})
    total, trainable = keras_config.count_params(layers, {c.name: c.trainable for c in configs})
    model_class, model_name = keras_config.model_identity(model_config)
    keras_version = hdf5.attr_text(f, "keras_version")
    optimizer = _optimizer(f, training_config)
    return CheckpointInfo(
        format=Format.KERAS_LEGACY_H5,
        kind=Kind.FULL,
        model_class=model_class,
        model_name=model_name,
        keras_version=keras_version,
        backend=hdf5.attr_text(f, "backend"),
        layers=tuple(layers),
        n_params=total,
        n_trainable_params=trainable,
        weights_bytes=_bytes_below(weights_group),
        optimizer=optimizer,
        training_config=_without_optimizer(training_config),
        notes=tuple(_notes(keras_version, optimizer, training_config)),
    )


def _weights_only(f: h5py.File) -> CheckpointInfo:
    layers = _layers(f, {})
    total, trainable = keras_config.count_params(layers, {})
    return CheckpointInfo(
        format=Format.KERAS_LEGACY_WEIGHTS_H5,
        kind=Kind.WEIGHTS,
        keras_version=hdf5.attr_text(f, "keras_version"),
        backend=hdf5.attr_text(f, "backend"),
        layers=tuple(layers),
        n_params=total,
        n_trainable_params=trainable,
        weights_bytes=_bytes_below(f),
        notes=("weights only: rebuild the architecture in code, then load_weights()",),
    )


def _layers(group: h5py.Group, classes: dict[str, str]) -> list[Layer]:
    """Layers in the order `layer_names` records, weights in `weight_names` order."""
    layers = []
    for name in hdf5.attr_list(group, "layer_names"):
        layer_group = hdf5.member(group, name)
        if not isinstance(layer_group, h5py.Group):
            raise CorruptCheckpoint(f"layer {name!r} is listed but has no group")
        weights = []
        for weight_name in hdf5.attr_list(layer_group, "weight_names"):
            dataset = hdf5.member(layer_group, weight_name)
            if not isinstance(dataset, h5py.Dataset):
                raise CorruptCheckpoint(f"layer {name!r} lists weight {weight_name!r}, not stored")
            weights.append(hdf5.weight_info(weight_name, dataset))
        n_params = sum(hdf5.n_elements(w.shape) for w in weights)
        layers.append(Layer(name, classes.get(name), n_params, tuple(weights)))
    return layers


def _optimizer(f: h5py.File, training_config: Any) -> OptimizerInfo | None:
    opt_config = (
        training_config.get("optimizer_config") if isinstance(training_config, dict) else None
    )
    class_name, config = keras_config.optimizer_class(opt_config)
    group = hdf5.member(f, "optimizer_weights")
    if not isinstance(group, h5py.Group):
        if class_name is None:
            return None
        return OptimizerInfo(class_name=class_name, name=(config or {}).get("name"), config=config)
    state = optimizer_state(group)
    return keras_config.with_optimizer_config(state, class_name, config)


def optimizer_state(group: h5py.Group) -> OptimizerInfo:
    """Variable count, bytes, and the iteration / learning-rate scalars of an optimizer group."""
    iterations: int | None = None
    learning_rate: float | None = None
    count = state_bytes = 0
    for path, dataset in hdf5.datasets(group):
        count += 1
        state_bytes += hdf5.nbytes(dataset)
        leaf = path.rsplit("/", 1)[-1].split(":", 1)[0]
        if leaf in _ITERATION_NAMES and iterations is None:
            value = hdf5.read_scalar(dataset)
            iterations = int(value) if value is not None else None
        elif leaf in _LR_NAMES and learning_rate is None:
            value = hdf5.read_scalar(dataset)
            learning_rate = float(value) if value is not None else None
    return OptimizerInfo(
        class_name=None,
        name=_first_child(group),
        iterations=iterations,
        learning_rate=learning_rate,
        n_variables=count,
        state_bytes=state_bytes,
    )


def _first_child(group: h5py.Group) -> str | None:
    """Keras 3 nests optimizer variables under the optimizer's name (`adam/...`)."""
    children = [k for k, obj in hdf5.members(group) if isinstance(obj, h5py.Group)]
    return children[0] if len(children) == 1 else None


def _bytes_below(group: h5py.Group) -> int:
    return sum(hdf5.nbytes(d) for _n, d in hdf5.datasets(group))


def _without_optimizer(training_config: Any) -> dict[str, Any] | None:
    if not isinstance(training_config, dict):
        return None
    return {k: v for k, v in training_config.items() if k != "optimizer_config"}


def _notes(
    keras_version: str | None, optimizer: OptimizerInfo | None, training_config: Any
) -> list[str]:
    notes = []
    has_state = optimizer is not None and optimizer.n_variables > 0
    major = (keras_version or "").split(".", 1)[0]
    if has_state and major == "3":
        notes.append(
            "resume: unreliable - Keras 3 (<= 3.15) drops the optimizer slots when loading a "
            "legacy .h5; resume from a .keras checkpoint instead"
        )
    elif has_state and major == "2":
        notes.append("resume: with tf-keras (Keras 2); Keras 3 loads it for inference only")
    elif not has_state:
        notes.append("resume: no - no optimizer state in the file")
    if training_config is None:
        notes.append("no training config: load_model() returns an uncompiled model")
    return notes
