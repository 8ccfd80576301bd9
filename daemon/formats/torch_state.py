"""What a torch checkpoint's unpickled structure says: model tensors, optimizer, scheduler,
counters and metrics, as a `CheckpointInfo`. The structure comes from `pickle_safe` (inert
records, never torch objects); values of tensors are never read, except the few 0-d scalars a
caller's `scalar` function reads from their storages (Adam's `step`, Lightning's scores).

The optimizer's class is stored nowhere in a torch state dict (docs/checkpoints.md): it is
inferred from the param_groups and state keys, and marked inferred.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from . import pickle_safe
from .pickle_safe import Opaque, TensorRecord

Scalar = Callable[[TensorRecord], float | None]
LIGHTNING_KEY = "pytorch-lightning_version"
_MODEL_KEYS = ("state_dict", "model_state_dict", "model", "model_state", "net", "module")
_OPTIMIZER_KEYS = ("optimizer_states", "optimizer_state_dict", "optimizer", "optim", "opt")
_SCHEDULER_KEYS = ("lr_schedulers", "scheduler_state_dict", "scheduler", "lr_scheduler", "sched")
_EPOCH_KEYS = ("epoch", "epochs")
_STEP_KEYS = ("global_step", "step", "iteration", "iter", "steps")
MAX_LAYERS = 20_000


def no_scalar(_tensor: TensorRecord) -> float | None:
    return None


def interpret(
    obj: Any, fmt: Format, scalar: Scalar = no_scalar, named: Iterable[str] = ()
) -> CheckpointInfo:
    """The CheckpointInfo of a torch file whose top-level object is `obj`; `named`: the globals
    its opcodes name that became placeholders (exact: `pickle_safe.placeholders`)."""
    notes: list[str] = []
    if isinstance(obj, dict) and LIGHTNING_KEY in obj:
        fmt = Format.LIGHTNING
    walked = pickle_safe.walk(obj)
    if walked.too_deep:  # a torch checkpoint nests < 10 deep: this is built to hurt a reader
        raise CorruptCheckpoint(
            f"pickle nested more than {pickle_safe.MAX_DEPTH} levels deep: not a torch "
            "checkpoint, refused"
        )
    if walked.too_many:
        raise CorruptCheckpoint(
            f"pickle of more than {pickle_safe.MAX_NODES} objects (shared references "
            "counted each time): refused"
        )
    opaque = set(walked.opaque) | set(named)
    if opaque:
        names = ", ".join(sorted(opaque)[:8])
        notes.append(f"objects of other classes kept as named placeholders, never run: {names}")
    top = _top(obj)
    optimizers = optimizer_state_of(obj)
    model_tensors = model_tensors_of(obj)
    optimizer = _optimizer_info(optimizers, scalar, top)
    scheduler = _scheduler(top)
    if scheduler is None and {"base_lrs", "last_epoch"} <= set(top):  # a `scheduler.pt` alone
        scheduler = _scheduler({"scheduler": top})
    epoch, step = _counter(top, _EPOCH_KEYS), _counter(top, _STEP_KEYS)
    metrics = _metrics(top, scalar)
    training: dict[str, Any] = {}
    if fmt == Format.LIGHTNING:
        training[LIGHTNING_KEY] = plain(top.get(LIGHTNING_KEY))
        checkpoint_state = _model_checkpoint_state(top)
        if checkpoint_state:
            training.update(_lightning_scores(checkpoint_state, scalar, metrics))
        if "hyper_parameters" in top:
            training["hyper_parameters"] = plain(top["hyper_parameters"])
        if "loops" in top:
            training["loops"] = True
    if scheduler is not None:
        training["scheduler"] = scheduler
    if epoch is not None:
        training["epoch"] = epoch
    if step is not None:
        training["step"] = step
    trainer_state = scheduler is not None or epoch is not None or step is not None
    trainer_state = trainer_state or "loops" in top
    resumable = optimizer is not None and optimizer.state_bytes >= 0 and trainer_state
    if optimizer is not None and not trainer_state:
        notes.append("optimizer state without scheduler or epoch/step: resume would restart them")
    layers, n_params, weights_bytes = _layers(model_tensors)
    if len(model_tensors) > MAX_LAYERS:
        notes.append(f"{len(model_tensors)} tensors: the first {MAX_LAYERS} listed")
    recorded: dict[str, Any] = {"epoch": epoch, "step": step, "metrics": metrics}
    return CheckpointInfo(
        format=fmt,
        kind=Kind.FULL if resumable else Kind.WEIGHTS,
        backend="torch",
        layers=layers,
        n_params=n_params,
        weights_bytes=weights_bytes,
        optimizer=optimizer,
        training_config=training or None,
        notes=tuple(notes),
        recorded=recorded,
    )


def _top(obj: Any) -> dict[Any, Any]:
    """The top-level dict whose keys are counters and metrics; {} for a bare state_dict (its
    0-d buffers are not metrics, its keys not counters)."""
    top = obj if isinstance(obj, dict) else {}
    return {} if top and all(isinstance(v, TensorRecord) for v in top.values()) else top


def model_tensors_of(obj: Any) -> list[tuple[str, TensorRecord]]:
    """The model's tensors (name, record) of a torch file's top-level object: its state dict
    by a known key, else every tensor outside optimizer, scheduler and trainer state (what a
    split keeps; `interpret` counts them as the weights)."""
    model = _model_dict(obj)
    if model is not None:
        return _tensors_of(model)
    if _is_optimizer_state(obj):
        return []  # an optimizer's state alone (`optimizer.pt`)
    top = _top(obj)
    optimizer_paths = {id(o) for o in optimizer_state_of(obj)}
    skip = {id(v) for k, v in top.items() if _is_training_state(k, v, optimizer_paths)}
    kept = {k: v for k, v in top.items() if id(v) not in skip and not _scalar_tensor(v)}
    return _tensors_of(kept if top else obj)


def tensors_info(
    tensors: Iterable[tuple[str, str, tuple[int, ...], int]],
) -> tuple[tuple[Layer, ...], int, int]:
    """(layers, parameter count, bytes) of (name, dtype, shape, bytes) rows."""
    by_module: dict[str, list[WeightInfo]] = {}
    n_params = total = 0
    for name, dtype, shape, nbytes in tensors:
        count = math.prod(shape)
        n_params += count
        total += nbytes
        module = name.rsplit(".", 1)[0] if "." in name else ""
        if sum(len(w) for w in by_module.values()) < MAX_LAYERS:
            by_module.setdefault(module, []).append(WeightInfo(name, shape, dtype))
    layers = tuple(
        Layer(module, None, sum(math.prod(w.shape) for w in weights), tuple(weights))
        for module, weights in by_module.items()
    )
    return layers, n_params, total


def _layers(tensors: list[tuple[str, TensorRecord]]) -> tuple[tuple[Layer, ...], int, int]:
    return tensors_info((name, t.dtype, t.shape, t.nbytes) for name, t in tensors)


def _tensors_of(obj: Any) -> list[tuple[str, TensorRecord]]:
    return pickle_safe.walk(obj).tensors


def _scalar_tensor(value: Any) -> bool:
    return isinstance(value, TensorRecord) and value.numel == 1 and len(value.shape) <= 1


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and "param_groups" in value and "state" in value


def optimizer_state_of(obj: Any) -> list[dict[str, Any]]:
    """The optimizer state dicts a torch file's top-level object holds (what a split drops)."""
    if _is_optimizer_state(obj):
        return [obj]
    if not isinstance(obj, dict):
        return []
    found: list[dict[str, Any]] = []
    for key in _OPTIMIZER_KEYS:
        value = obj.get(key)
        if isinstance(value, dict) and _is_optimizer_state(value):
            found.append(value)
        elif isinstance(value, list | tuple):
            found += [v for v in value if _is_optimizer_state(v)]
        elif isinstance(value, dict):  # {"generator": sd, "discriminator": sd}
            found += [v for v in value.values() if _is_optimizer_state(v)]
    if not found:
        found = [v for v in obj.values() if _is_optimizer_state(v)]
    return found


def _is_training_state(key: Any, value: Any, optimizers: set[int]) -> bool:
    if id(value) in optimizers or _is_optimizer_state(value) or key in _OPTIMIZER_KEYS:
        return True
    return key in _SCHEDULER_KEYS or key in ("callbacks", "loops", "hyper_parameters")


def _model_dict(obj: Any) -> Any:
    if not isinstance(obj, dict) or _is_optimizer_state(obj):
        return None
    for key in _MODEL_KEYS:
        value = obj.get(key)
        if isinstance(value, dict) and _tensors_of(value):
            return value
    if obj and all(isinstance(v, TensorRecord) for v in obj.values()):
        return obj  # a bare state_dict
    return None


def _optimizer_info(
    optimizers: list[dict[str, Any]], scalar: Scalar, top: Mapping[Any, Any]
) -> OptimizerInfo | None:
    if not optimizers:
        return None
    groups: list[dict[str, Any]] = []
    state_tensors: list[tuple[str, TensorRecord]] = []
    state_keys: set[str] = set()
    steps: list[float] = []
    for opt in optimizers:
        for group in opt.get("param_groups") or []:
            if isinstance(group, dict):
                params = group.get("params")
                hyper = {str(k): plain(v) for k, v in group.items() if k != "params"}
                hyper["n_params"] = len(params) if isinstance(params, list) else None
                groups.append(hyper)
        state = opt.get("state")
        for per_param in state.values() if isinstance(state, dict) else []:
            if not isinstance(per_param, dict):
                continue
            state_keys.update(str(k) for k in per_param)
            step = per_param.get("step")
            if isinstance(step, TensorRecord) and not steps:
                value = scalar(step)
                if value is not None:
                    steps.append(value)
            elif isinstance(step, int | float) and not isinstance(step, bool):
                steps.append(float(step))
        state_tensors += _tensors_of(state)
    class_name, evidence = infer_optimizer(groups, state_keys)
    config: dict[str, Any] = {"param_groups": groups, "class_inferred": class_name is not None}
    if evidence:
        config["inferred_from"] = evidence
    if len(optimizers) > 1:
        config["n_optimizers"] = len(optimizers)
    first_lr = groups[0].get("lr") if groups else None
    # a step of NaN or inf (the bytes of a storage: found by fuzzing) counts nothing
    iterations = int(steps[0]) if steps and math.isfinite(steps[0]) else None
    global_step = top.get("global_step")
    if iterations is None and isinstance(global_step, int) and LIGHTNING_KEY in top:
        iterations = global_step
    return OptimizerInfo(
        class_name=class_name,
        config=config,
        iterations=iterations,
        learning_rate=float(first_lr) if isinstance(first_lr, int | float) else None,
        n_variables=len(state_tensors),
        state_bytes=sum(t.nbytes for _, t in state_tensors),
    )


def infer_optimizer(groups: list[dict[str, Any]], state_keys: set[str]) -> tuple[str | None, str]:
    """The optimizer class its param_groups and per-parameter state keys point to (torch 2.x
    defaults), with what it was inferred from; (None, "") when nothing is telling."""
    keys = set().union(*(g.keys() for g in groups)) if groups else set()
    first = groups[0] if groups else {}
    if "betas" in keys and "momentum_decay" in keys:
        return "NAdam", "param_groups: betas, momentum_decay"
    if "betas" in keys and "amsgrad" in keys:
        if first.get("decoupled_weight_decay") is True:
            return "AdamW", "param_groups: decoupled_weight_decay True"
        if "decoupled_weight_decay" in keys:
            return "Adam", "param_groups: betas, amsgrad, decoupled_weight_decay False"
        return "Adam", "param_groups: betas, amsgrad (Adam or AdamW: torch < 2.6 tells neither)"
    if {"momentum", "nesterov", "dampening"} <= keys:
        return "SGD", "param_groups: momentum, nesterov, dampening"
    if {"alpha", "centered"} <= keys:
        return "RMSprop", "param_groups: alpha, centered"
    if {"lr_decay", "initial_accumulator_value"} <= keys:
        return "Adagrad", "param_groups: lr_decay, initial_accumulator_value"
    if {"exp_avg", "exp_avg_sq"} <= state_keys:
        return "Adam", "state: exp_avg, exp_avg_sq"
    if "momentum_buffer" in state_keys:
        return "SGD", "state: momentum_buffer"
    return None, ""


def _scheduler(top: Mapping[Any, Any]) -> dict[str, Any] | None:
    for key in _SCHEDULER_KEYS:
        value = top.get(key)
        if isinstance(value, list | tuple) and value and isinstance(value[0], dict):
            value = value[0]
        if isinstance(value, dict) and value:
            out = {str(k): plain(v) for k, v in value.items() if not str(k).startswith("_")}
            out["type"] = _scheduler_type(value)
            return out
    return None


def _scheduler_type(state: Mapping[Any, Any]) -> str | None:
    """The scheduler class its state's keys point to (no class name is stored)."""
    keys = set(state)
    for names, kind in (
        ({"step_size", "gamma"}, "StepLR"),
        ({"milestones", "gamma"}, "MultiStepLR"),
        ({"T_max", "eta_min"}, "CosineAnnealingLR"),
        ({"T_0", "T_mult"}, "CosineAnnealingWarmRestarts"),
        ({"lr_lambdas"}, "LambdaLR"),
        ({"max_lrs", "total_steps"}, "OneCycleLR"),
        ({"patience", "cooldown"}, "ReduceLROnPlateau"),
        ({"gamma"}, "ExponentialLR"),
    ):
        if names <= keys:
            return kind
    return None


def _counter(top: Mapping[Any, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = top.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _metrics(top: Mapping[Any, Any], scalar: Scalar) -> dict[str, float]:
    """Float values saved beside the weights (`loss`, `val_loss`, `best_acc`, a `metrics` dict)."""
    out: dict[str, float] = {}
    sources = [top]
    if isinstance(top.get("metrics"), dict):
        sources.append(top["metrics"])
    for source in sources:
        for key, value in source.items():
            if not isinstance(key, str) or key in _EPOCH_KEYS + _STEP_KEYS or len(out) >= 64:
                continue
            number = _number(value, scalar)
            if number is not None and not isinstance(value, int):
                out[key] = number
    return out


def _number(value: Any, scalar: Scalar) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float | int):
        return float(value)
    if _scalar_tensor(value):
        return scalar(value)
    return None


def _model_checkpoint_state(top: Mapping[Any, Any]) -> dict[str, Any] | None:
    callbacks = top.get("callbacks")
    if not isinstance(callbacks, dict):
        return None
    # Its key is the callback's class name and settings: `ModelCheckpoint{...}`, or a user's
    # subclass (`MyCheckpoint{...}`, `train.<locals>.Reporting{...}`), known by its state's keys.
    states = [(k, v) for k, v in callbacks.items() if isinstance(k, str) and isinstance(v, dict)]
    for key, value in states:
        if key.startswith("ModelCheckpoint"):
            return value
    for _key, value in states:
        if "best_k_models" in value and "best_model_path" in value:
            return value
    return None


def _lightning_scores(
    state: Mapping[str, Any], scalar: Scalar, metrics: dict[str, float]
) -> dict[str, Any]:
    """ModelCheckpoint's monitor and scores; the current score is this file's metric."""
    monitor = state.get("monitor")
    out: dict[str, Any] = {"monitor": monitor if isinstance(monitor, str) else None}
    best = _number(state.get("best_model_score"), scalar)
    current = _number(state.get("current_score"), scalar)
    out["best_model_score"] = best
    out["current_score"] = current
    out["best_model_path"] = plain(state.get("best_model_path"))
    top_k = state.get("best_k_models")
    if isinstance(top_k, dict):
        out["best_k_models"] = {
            str(path): _number(score, scalar) for path, score in list(top_k.items())[:64]
        }
    if isinstance(monitor, str) and current is not None:
        metrics.setdefault(monitor, current)
    return out


MAX_PLAIN_NODES = 10_000  # a JSON copy for the catalog: hyper-parameters are < 1,000 values


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of an unpickled value: inert records described, never expanded far.
    At most 12 deep, 200 items a container and MAX_PLAIN_NODES values in all: a structure of
    shared references (a DAG the memo makes from a few KB) is copied within that budget, not
    as the tree it unfolds to (200**6 values)."""
    budget = [MAX_PLAIN_NODES]
    return _plain(value, depth, budget)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if depth > 12 or budget[0] < 0:
        return "..."
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, TensorRecord):
        return {"tensor": value.dtype, "shape": list(value.shape)}
    if isinstance(value, Opaque):
        return f"<{value.global_name}>"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        items = list(itertools.islice(value.items(), 200))
        return {str(k): _plain(v, depth + 1, budget) for k, v in items}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v, depth + 1, budget) for v in itertools.islice(value, 200)]
    return f"<{type(value).__name__}>"
