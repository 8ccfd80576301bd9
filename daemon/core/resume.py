"""Can training resume from a checkpoint? One answer with its reason, from catalog facts alone.

`ckpt latest --resumable` filters by it and prints its reason (`resume_reason`); `ckpt describe`
will say the same. "Resumable" means: the file holds the optimizer state (slots, iteration count)
and the library that loads it puts that state back, so `fit()` continues where training stopped
instead of restarting Adam's moments from zero. The facts behind each rule: a Keras 3 legacy
`.h5` loads with only 2 optimizer variables (keras/src/legacy/saving/legacy_h5_format.py builds
the optimizer without its slots) and `fit()` then raises; tf-keras resumes its own `.h5`; a
tf-keras `save_weights('x.h5')` holds no optimizer state; a SavedModel is loaded for serving; a
`.keras` whose compile config has no optimizer (Keras 3 drops it from every `.keras` saved after
an `.h5` save in the same process: `ModelCheckpoint("model-{epoch}.keras")` beside a `best.h5`)
holds the state, but `load_model` compiles a default RMSprop and skips it: training restarts at
iteration 0. Every answer to "resumable" (`latest --resumable` and its `--json`, the model card,
`describe`) is this one function's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import Format, Kind

# The formats that may be resumable at all (the catalog queries pre-filter on them and on
# optimizer_bytes > 0; `resumability` is the judge of every row that passes).
MAY_RESUME: tuple[Format, ...] = (Format.KERAS_ZIP, Format.KERAS_LEGACY_H5, Format.TF_CHECKPOINT)
# torch files: a dict the user's code loads with `load_state_dict`; the reader calls it `full`
# when it holds optimizer state and trainer state (a scheduler, an epoch/step, Lightning loops).
TORCH_RESUMES = (Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.LIGHTNING)
MAY_RESUME += TORCH_RESUMES
# Folder saves: a step's whole training state (an Orbax tree, a DCP state dict) when it holds
# optimizer state; restored by the framework that wrote it, never by us.
MAY_RESUME += (Format.ORBAX, Format.TORCH_DCP)
# A Hugging Face folder is `full` when optimizer.pt, scheduler.pt and trainer_state.json are all
# there (formats.hf_folder): `Trainer.train(resume_from_checkpoint=folder)` restores each.
MAY_RESUME += (Format.HF_FOLDER,)
# Large-model stacks (issue 44): per-rank files with their optimizer files, a Megatron iter_N/
# holding optimizer state; each restored by its own stack from the folder.
SHARDED_RESUMES = {
    Format.TORCH_RANKS: "per-rank model and optimizer files: each rank loads its own "
    "(verl's checkpoint manager, or load_state_dict of its DTensors)",
    Format.MEGATRON_DIST: "Megatron torch_dist with optimizer state: --load the parent folder",
    Format.MEGATRON_LEGACY: "Megatron checkpoint with optimizer state: --load the parent folder",
}
MAY_RESUME += tuple(SHARDED_RESUMES)
# The Keras major versions whose legacy `.h5` resumes (tf-keras, Keras 2; the catalog queries
# match `keras_version LIKE 'N.%'` on them, so a run of Keras 3 `.h5` files is not paged through).
LEGACY_H5_RESUMES_IN = ("1", "2")


@dataclass(frozen=True)
class Resumability:
    resumable: bool
    reason: str


def resumability(
    format: Format | None,
    kind: str | None,
    optimizer_bytes: int | None,
    keras_version: str | None,
    *,
    optimizer_config_lost: bool = False,
) -> Resumability:
    """Whether training can resume from a checkpoint of this `format` and `kind`, with
    `optimizer_bytes` of optimizer state, written by Keras `keras_version` (None: unknown);
    `optimizer_config_lost`: its compile config names no optimizer (`optimizer_config_lost()`)."""
    if format is None:
        return Resumability(False, "format unknown")
    if format == Format.SAVED_MODEL:
        return Resumability(False, "a SavedModel is for serving: training does not resume from it")
    if format == Format.KERAS_LEGACY_WEIGHTS_H5:
        return Resumability(False, "weights only (tf-keras save_weights .h5): no optimizer state")
    if format == Format.KERAS_WEIGHTS_H5:
        # Keras 3 writes optimizer/vars into a .weights.h5, but only a model the user builds and
        # compiles identically can take them (model.load_weights); load_model cannot open it.
        return Resumability(
            False,
            "weights only (.weights.h5): needs a model you build and compile yourself "
            "(model.load_weights), not load_model",
        )
    if format == Format.SAFETENSORS:
        return Resumability(False, "safetensors holds weights only: no optimizer state")
    if not optimizer_bytes or optimizer_bytes <= 0:
        return Resumability(False, "no optimizer state: training would restart the optimizer")
    if format == Format.ORBAX:
        return Resumability(
            True,
            "Orbax step with optimizer state: CheckpointManager.restore(step) "
            "(Keras: OrbaxCheckpoint restores it into the model)",
        )
    if format == Format.TORCH_DCP:
        return Resumability(
            True, "DCP folder with optimizer state: dcp.load into the model and optimizer dicts"
        )
    if format in SHARDED_RESUMES:
        return Resumability(True, SHARDED_RESUMES[format])
    if format in TORCH_RESUMES:
        if kind != Kind.FULL.value:
            return Resumability(
                False,
                "optimizer state without a scheduler or epoch/step: resume would restart them",
            )
        if format == Format.LIGHTNING:
            return Resumability(
                True,
                "Lightning checkpoint with optimizer and loop state: Trainer.fit(ckpt_path=...)",
            )
        return Resumability(
            True, "torch checkpoint with optimizer and trainer state: load_state_dict on each"
        )
    if format == Format.HF_FOLDER:
        if kind == Kind.ADAPTER.value:  # optimizer state: a Trainer checkpoint of the adapter
            return Resumability(
                True,
                "Trainer checkpoint of a PEFT adapter with optimizer state: "
                "Trainer.train(resume_from_checkpoint=...) on the base model with the adapter",
            )
        if kind != Kind.FULL.value:
            return Resumability(
                False, "no optimizer.pt, scheduler.pt and trainer_state.json all together"
            )
        return Resumability(
            True,
            "Trainer checkpoint with optimizer, scheduler and trainer state: "
            "Trainer.train(resume_from_checkpoint=...)",
        )
    if format == Format.TF_CHECKPOINT:
        return Resumability(
            True, "TF checkpoint with optimizer state: tf.train.Checkpoint(...).restore(prefix)"
        )
    if kind != Kind.FULL.value:
        return Resumability(False, "weights only: no architecture to load")
    if format == Format.KERAS_ZIP and optimizer_config_lost:
        return Resumability(
            False,
            "unreliable: its compile config lost the optimizer (Keras saved it after an .h5 "
            "save in the same process); load_model compiles a default RMSprop at iteration 0 "
            "and skips the saved optimizer state",
        )
    if format == Format.KERAS_ZIP:
        return Resumability(True, "Keras archive with optimizer state: keras.models.load_model")
    major = _major(keras_version)
    if major is None:
        return Resumability(
            False, "legacy .h5 of an unknown Keras version: its optimizer state may not load"
        )
    if str(major) not in LEGACY_H5_RESUMES_IN:
        return Resumability(
            False,
            f"legacy .h5 written by Keras {keras_version}: Keras 3 drops its optimizer slots "
            "on load and fit() then fails",
        )
    return Resumability(
        True, f"legacy .h5 of Keras {keras_version} with optimizer state: tf_keras load_model"
    )


def _major(version: str | None) -> int | None:
    head = (version or "").strip().split(".", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None


def optimizer_config_lost(format: Format | None, details: Mapping[str, Any] | None) -> bool:
    """Whether a Keras archive's compile config names no optimizer, from the catalog's `details`
    of it (or `show --json`): its `optimizer_config` recorded, and empty. False when it was not
    recorded (nothing says it was lost). `resumability` judges it only beside optimizer state."""
    if format != Format.KERAS_ZIP or not details or "optimizer_config" not in details:
        return False
    return not details["optimizer_config"]
