"""Hugging Face folders as one checkpoint: a Trainer `checkpoint-N/` or a `save_pretrained` model.

A Trainer checkpoint holds `config.json`, the weights (`formats.hf_weights`), `optimizer.pt`,
`scheduler.pt`, `rng_state*.pth`, `training_args.bin`, and `trainer_state.json`, which the
Trainer writes after everything else: a Trainer folder without it is a save that has not finished
(or never will). A Trainer run with a DeepSpeed config writes `latest` and the DeepSpeed tag
folder (`global_stepN/`) instead of `optimizer.pt`/`scheduler.pt`: that tag is the folder's
resume state, judged whole by DeepSpeed's rules (`formats.deepspeed_tag.in_trainer_folder`).
Every pickle among them is read by the restricted unpickler (`training_args.bin`'s
`TrainingArguments` stays a named placeholder); none is ever run. Resumable means optimizer,
scheduler and trainer state are all there (`save_only_model=True` writes none of them).

A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`/`.bin`, alone or as
the model of a Trainer checkpoint) is read here too, as the same HF folder: its weights by the
same weights reader, its config by `formats.peft_adapter`; its kind is `adapter`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo
from ..fs import folder_layouts
from ..fs.folder_layouts import ADAPTER_CONFIG, HF_CONFIG, TRAINER_FOLDER, TRAINER_STATE
from . import deepspeed_tag, hf_weights, peft_adapter, torch_state

_CONFIG_KEYS = ("architectures", "model_type", "torch_dtype", "dtype", "transformers_version")
# Trainer state that `save_only_model=True` leaves out: all three make a checkpoint resumable.
RESUME_FILES = ("optimizer.pt", "scheduler.pt", TRAINER_STATE)
_PICKLED_EXTRAS = ("training_args.bin", "scaler.pt")
# The log_history keys that are a checkpoint's metrics; `eval_*` rates and runtimes are not.
_STEP_METRICS = ("loss", "learning_rate", "grad_norm")
_NOT_METRICS = ("_runtime", "_samples_per_second", "_steps_per_second")


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """Metadata of the HF folder `folder`, its files opened beneath `root`."""
    names = frozenset(p.name for p in folder_layouts.tree_files(folder) if p.parent == folder)
    trainer = bool(TRAINER_FOLDER.match(folder.name)) or bool(names & {TRAINER_STATE})
    trainer = trainer or "optimizer.pt" in names
    zero = deepspeed_tag.in_trainer_folder(folder, names, root) if trainer else None
    if zero is not None and not any(folder_layouts.is_hf_weights(n) for n in names):
        weights = deepspeed_tag.weights_of(zero)  # ZeRO-3 without 16-bit gathering: none
    else:
        weights = hf_weights.read_weights(folder, names, root)
    if trainer and TRAINER_STATE not in names:
        raise CorruptCheckpoint(
            f"{TRAINER_STATE} not written (the Trainer writes it last): the save has not "
            "finished, or was cut short"
        )
    notes = list(weights.notes)
    training: dict[str, Any] = {
        "layout": "trainer checkpoint" if trainer else "save_pretrained",
        "weights_files": list(weights.files),
    }
    if weights.index:
        training["index"] = weights.index
    model_class = None
    if HF_CONFIG in names:
        config = _config(hf_weights.read_json(folder / HF_CONFIG, root))
        training["config"] = config
        archs = config.get("architectures")
        model_class = archs[0] if isinstance(archs, list) and archs else None
    elif not weights.index and ADAPTER_CONFIG not in names:
        notes.append("no config.json: from_pretrained cannot build the model from this folder")
    adapter = peft_adapter.read_config(folder, root) if ADAPTER_CONFIG in names else None
    if adapter is not None:  # a PEFT adapter (alone, or inside a Trainer checkpoint)
        training["adapter"] = adapter
        notes.extend(peft_adapter.notes(adapter))
    state = trainer_state(hf_weights.read_json(folder / TRAINER_STATE, root)) if trainer else {}
    if state:
        training["trainer_state"] = state
        number = TRAINER_FOLDER.match(folder.name)
        if number and state.get("global_step") not in (None, int(folder.name.split("-")[1])):
            notes.append(
                f"{TRAINER_STATE} says global_step {state['global_step']}, the folder's name "
                f"{folder.name}"
            )
    optimizer = _optimizer(folder, names, root, state)
    scheduler = _scheduler(folder, names, root)
    if scheduler is not None:
        training["scheduler"] = scheduler
    for name in sorted(n for n in names if n in _PICKLED_EXTRAS or _is_rng_state(n)):
        extra = hf_weights.read_file(folder / name, root)  # complete, and never run
        training.setdefault("extras", []).append(name)
        notes.extend(f"{name}: {n}" for n in extra.notes if "placeholders" not in n)
    present = [n for n in RESUME_FILES if n in names]
    resumable = len(present) == len(RESUME_FILES)
    recorded = _recorded(state)
    if zero is not None:  # DeepSpeed holds the optimizer (and scheduler) state
        optimizer = optimizer or deepspeed_tag.optimizer_of(zero)
        training["deepspeed"] = recorded["sharding"] = deepspeed_tag.sharding_of(zero)
        resumable = optimizer is not None and TRAINER_STATE in names
    if trainer and not resumable:
        lacking = ", ".join(n for n in RESUME_FILES if n not in names)
        notes.append(f"not resumable: no {lacking} (saved with save_only_model?)")
    training["resumable"] = resumable
    kind = Kind.FULL if resumable else Kind.WEIGHTS
    return CheckpointInfo(
        format=Format.HF_FOLDER,
        kind=Kind.ADAPTER if adapter is not None else kind,
        model_class=model_class or (f"PEFT {adapter.get('peft_type')}" if adapter else None),
        model_name=(training.get("config") or {}).get("model_type"),
        backend=weights.backend or "torch",
        layers=merge_layers(weights.layers),
        n_params=weights.n_params,
        weights_bytes=weights.nbytes,
        optimizer=optimizer,
        training_config=training,
        notes=tuple(notes),
        recorded=recorded,
    )


def _config(doc: dict[str, Any]) -> dict[str, Any]:
    found = {k: torch_state.plain(doc[k]) for k in _CONFIG_KEYS if k in doc}
    if "dtype" in found and "torch_dtype" not in found:  # transformers 5 renamed it
        found["torch_dtype"] = found["dtype"]
    return found


def trainer_state(doc: dict[str, Any]) -> dict[str, Any]:
    """What `trainer_state.json` says of its checkpoint: step, epoch (a float: 1.5 is mid-epoch),
    the log_history entries at that step, and the Trainer's own best."""
    step = doc.get("global_step")
    step = step if isinstance(step, int) and not isinstance(step, bool) else None
    raw_epoch = doc.get("epoch")
    epoch = float(raw_epoch) if raw_epoch is not None and _is_number(raw_epoch) else None
    metrics: dict[str, float] = {}
    history = doc.get("log_history")
    for entry in history if isinstance(history, list) else []:
        if isinstance(entry, dict) and entry.get("step") == step:
            for key, value in entry.items():
                if _is_metric(str(key)) and _is_number(value):
                    metrics[str(key)] = float(value)
    state: dict[str, Any] = {"global_step": step, "epoch": epoch, "metrics": metrics}
    for key in ("best_metric", "best_model_checkpoint", "max_steps", "num_train_epochs"):
        value = doc.get(key)
        if value is not None and (_is_number(value) or isinstance(value, str)):
            state[key] = value
    best = doc.get("best_global_step")
    if isinstance(best, int):
        state["best_global_step"] = best
    return state


def _is_metric(key: str) -> bool:
    if key in _STEP_METRICS:
        return True
    return key.startswith("eval_") and not key.endswith(_NOT_METRICS)


def _is_number(value: Any) -> bool:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value)


def _recorded(state: dict[str, Any]) -> dict[str, Any]:
    epoch = state.get("epoch")
    whole = int(epoch) if isinstance(epoch, float) and epoch.is_integer() else None
    return {"epoch": whole, "step": state.get("global_step"), "metrics": state.get("metrics", {})}


def _optimizer(
    folder: Path, names: frozenset[str], root: Path | None, state: dict[str, Any]
) -> OptimizerInfo | None:
    if "optimizer.pt" not in names:
        return None
    info = hf_weights.read_file(folder / "optimizer.pt", root)
    opt = info.optimizer
    if opt is None:
        raise CorruptCheckpoint("optimizer.pt holds no optimizer state_dict")
    logged = state.get("metrics", {}).get("learning_rate")
    if opt.learning_rate is None and logged is not None:
        return OptimizerInfo(**{**opt.__dict__, "learning_rate": logged})
    return opt


def _scheduler(folder: Path, names: frozenset[str], root: Path | None) -> Any:
    if "scheduler.pt" not in names:
        return None
    info = hf_weights.read_file(folder / "scheduler.pt", root)
    found = (info.training_config or {}).get("scheduler")
    return found if found is not None else {"file": "scheduler.pt"}


def _is_rng_state(name: str) -> bool:
    return name.startswith("rng_state") and name.endswith(".pth")


def merge_layers(layers: list[Layer]) -> tuple[Layer, ...]:
    """One layer per module, even where shards cut a module's tensors apart."""
    merged: dict[str, Layer] = {}
    for layer in layers:
        seen = merged.get(layer.name)
        merged[layer.name] = (
            layer
            if seen is None
            else Layer(
                layer.name,
                seen.class_name,
                seen.n_params + layer.n_params,
                seen.weights + layer.weights,
            )
        )
    return tuple(merged.values())
