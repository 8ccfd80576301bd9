"""What Keras's JSON configs say about a model: layer classes, trainability, optimizer. Pure."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.model import Layer, OptimizerInfo, WeightInfo

# Weights Keras never trains even in a trainable layer (BatchNormalization's running statistics):
# by name in legacy files, by position in Keras 3 stores (trainable variables come first there).
_NON_TRAINABLE_WEIGHTS = {"moving_mean", "moving_variance"}
_NON_TRAINABLE_POSITIONS = {"batch_normalization": {"2", "3"}}
_FLOAT_KINDS = ("float", "bfloat", "half")


@dataclass(frozen=True)
class LayerConfig:
    name: str
    class_name: str
    trainable: bool


def top_level_layers(model_config: Any) -> list[LayerConfig]:
    """The model's own layers in model order, from a `model_config` / `config.json` document."""
    if not isinstance(model_config, dict):
        return []
    config = model_config.get("config")
    layers = config.get("layers") if isinstance(config, dict) else None
    if not isinstance(layers, list):
        return []
    out = []
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        raw_config = layer.get("config")
        layer_config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
        name = layer_config.get("name") or layer.get("name")
        if isinstance(name, str):
            out.append(
                LayerConfig(
                    name=name,
                    class_name=str(layer.get("class_name", "")),
                    trainable=layer_config.get("trainable", True) is not False,
                )
            )
    return out


def model_identity(model_config: Any) -> tuple[str | None, str | None]:
    """(class name, model name) from a model config document."""
    if not isinstance(model_config, dict):
        return None, None
    config = model_config.get("config")
    name = config.get("name") if isinstance(config, dict) else None
    class_name = model_config.get("class_name")
    return (
        class_name if isinstance(class_name, str) else None,
        name if isinstance(name, str) else None,
    )


def is_trainable(weight: WeightInfo, layer_trainable: bool, store_key: str = "") -> bool:
    """Whether Keras trains this weight. `store_key` is a Keras 3 layer group ("dense_1")."""
    if not layer_trainable or not weight.dtype.startswith(_FLOAT_KINDS):
        return False
    leaf = weight.name.rsplit("/", 1)[-1].split(":", 1)[0]
    if leaf in _NON_TRAINABLE_WEIGHTS:
        return False
    positions = _NON_TRAINABLE_POSITIONS.get(re.sub(r"_\d+$", "", store_key), set())
    return not (weight.name.startswith("vars/") and leaf in positions)


def count_params(
    layers: Iterable[Layer], trainable: dict[str, bool], store_keys: dict[str, str] | None = None
) -> tuple[int, int]:
    """(total, trainable) parameter counts; `trainable` maps layer name to its config flag,
    `store_keys` layer name to its Keras 3 group key."""
    total = n_trainable = 0
    for layer in layers:
        key = (store_keys or {}).get(layer.name, "")
        for weight in layer.weights:
            size = math.prod(weight.shape)
            total += size
            if is_trainable(weight, trainable.get(layer.name, True), key):
                n_trainable += size
    return total, n_trainable


def optimizer_class(config: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(class name, config) from `{class_name, config}`; tf-keras's "Custom>Adam" becomes "Adam"."""
    if not isinstance(config, dict):
        return None, None
    class_name = config.get("class_name")
    if isinstance(class_name, str):
        class_name = class_name.split(">", 1)[-1]
    inner = config.get("config")
    return (
        class_name if isinstance(class_name, str) else None,
        inner if isinstance(inner, dict) else None,
    )


def configured_learning_rate(config: dict[str, Any] | None) -> float | dict[str, Any] | None:
    """The optimizer's configured LR: a number, or a schedule's `{class_name, config}`."""
    if not config:
        return None
    value = config.get("learning_rate", config.get("lr"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value if isinstance(value, dict) else None


def with_optimizer_config(
    info: OptimizerInfo, class_name: str | None, config: dict[str, Any] | None
) -> OptimizerInfo:
    """`info` read from the state, completed by the config; a stored LR beats the configured."""
    configured = configured_learning_rate(config)
    return OptimizerInfo(
        class_name=class_name or info.class_name,
        name=(config or {}).get("name") or info.name,
        config=config,
        iterations=info.iterations,
        learning_rate=info.learning_rate
        if info.learning_rate is not None
        else (configured if isinstance(configured, float) else None),
        n_variables=info.n_variables,
        state_bytes=info.state_bytes,
    )


def snake_case(class_name: str) -> str:
    """Keras 3's `naming.to_snake_case`: the key a layer's weights are stored under."""
    name = re.sub(r"\W+", "", class_name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def weights_store_keys(layers: list[LayerConfig]) -> dict[str, LayerConfig]:
    """Keras 3 `.weights.h5` group key → layer, for files that do not record layer names.

    Keras (saving_lib._save_container_state) names each layer's group after its class in snake
    case, numbering repeats `_1`, `_2` in model order; every layer takes a number, with or
    without weights.
    """
    counts: dict[str, int] = {}
    keys: dict[str, LayerConfig] = {}
    for layer in layers:
        base = snake_case(layer.class_name)
        n = counts.get(base, 0)
        counts[base] = n + 1
        keys[base if n == 0 else f"{base}_{n}"] = layer
    return keys
