"""Each format's resume rule: can training resume from a checkpoint, and why (pure).

"Resumable" means: the file holds the optimizer state (slots, iteration count) and the library
that loads it puts that state back, so `fit()` continues where training stopped instead of
restarting Adam's moments from zero. The facts behind the Keras rules: a Keras 3 legacy `.h5`
loads with only 2 optimizer variables (keras/src/legacy/saving/legacy_h5_format.py builds the
optimizer without its slots) and `fit()` then raises; tf-keras resumes its own `.h5`; a
tf-keras `save_weights('x.h5')` holds no optimizer state; a SavedModel is loaded for serving; a
`.keras` whose compile config has no optimizer (Keras 3 drops it from every `.keras` saved after
an `.h5` save in the same process: `ModelCheckpoint("model-{epoch}.keras")` beside a `best.h5`)
holds the state, but `load_model` compiles a default RMSprop and skips it: training restarts at
iteration 0. Each rule is one format row's (`core.families`); `core.resume` asks the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .model import Format, Kind


@dataclass(frozen=True)
class ResumeFacts:
    """What the catalog knows of a checkpoint that a resume rule may weigh."""

    format: Format
    kind: str | None
    optimizer_bytes: int | None
    keras_version: str | None
    optimizer_config_lost: bool = False


@dataclass(frozen=True)
class Resumability:
    resumable: bool
    reason: str


ResumeRule = Callable[[ResumeFacts], Resumability]

# The Keras major versions whose legacy `.h5` resumes (tf-keras, Keras 2; the catalog queries
# match `keras_version LIKE 'N.%'` on them, so a run of Keras 3 `.h5` files is not paged through).
LEGACY_H5_RESUMES_IN = ("1", "2")
NO_OPTIMIZER = Resumability(False, "no optimizer state: training would restart the optimizer")


@dataclass(frozen=True)
class never:
    """The rule of a format training never resumes from, whatever the file holds (the
    catalog's `--resumable` pre-filter leaves its rows out: `core.resume.may_resume`)."""

    reason: str

    def __call__(self, _facts: ResumeFacts) -> Resumability:
        return Resumability(False, self.reason)


def with_optimizer(yes: str, *, full: str | None = None) -> ResumeRule:
    """Resumable when it holds optimizer state (`yes`); with `full`, only when the reader also
    called it `full` (trainer state beside the optimizer's), else not, for reason `full`."""

    def rule(facts: ResumeFacts) -> Resumability:
        if not facts.optimizer_bytes or facts.optimizer_bytes <= 0:
            return NO_OPTIMIZER
        if full is not None and facts.kind != Kind.FULL.value:
            return Resumability(False, full)
        return Resumability(True, yes)

    return rule


def _keras(then: Callable[[ResumeFacts], Resumability]) -> ResumeRule:
    def rule(facts: ResumeFacts) -> Resumability:
        if not facts.optimizer_bytes or facts.optimizer_bytes <= 0:
            return NO_OPTIMIZER
        if facts.kind != Kind.FULL.value:
            return Resumability(False, "weights only: no architecture to load")
        return then(facts)

    return rule


def _keras_archive(facts: ResumeFacts) -> Resumability:
    if facts.optimizer_config_lost:
        return Resumability(
            False,
            "unreliable: its compile config lost the optimizer (Keras saved it after an .h5 "
            "save in the same process); load_model compiles a default RMSprop at iteration 0 "
            "and skips the saved optimizer state",
        )
    return Resumability(True, "Keras archive with optimizer state: keras.models.load_model")


def _legacy_h5(facts: ResumeFacts) -> Resumability:
    version = facts.keras_version
    major = _major(version)
    if major is None:
        return Resumability(
            False, "legacy .h5 of an unknown Keras version: its optimizer state may not load"
        )
    if str(major) not in LEGACY_H5_RESUMES_IN:
        return Resumability(
            False,
            f"legacy .h5 written by Keras {version}: Keras 3 drops its optimizer slots "
            "on load and fit() then fails",
        )
    return Resumability(
        True, f"legacy .h5 of Keras {version} with optimizer state: tf_keras load_model"
    )


def _major(version: str | None) -> int | None:
    head = (version or "").strip().split(".", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None


keras_archive = _keras(_keras_archive)
keras_legacy_h5 = _keras(_legacy_h5)
keras_legacy_weights = never("weights only (tf-keras save_weights .h5): no optimizer state")
# Keras 3 writes optimizer/vars into a .weights.h5, but only a model the user builds and
# compiles identically can take them (model.load_weights); load_model cannot open it.
keras_weights = never(
    "weights only (.weights.h5): needs a model you build and compile yourself "
    "(model.load_weights), not load_model"
)
saved_model = never("a SavedModel is for serving: training does not resume from it")
safetensors = never("safetensors holds weights only: no optimizer state")
tf_checkpoint = with_optimizer(
    "TF checkpoint with optimizer state: tf.train.Checkpoint(...).restore(prefix)"
)
# torch files: a dict the user's code loads with `load_state_dict`; the reader calls it `full`
# when it holds optimizer state and trainer state (a scheduler, an epoch/step, Lightning loops).
_TORCH_PARTIAL = "optimizer state without a scheduler or epoch/step: resume would restart them"
torch = with_optimizer(
    "torch checkpoint with optimizer and trainer state: load_state_dict on each",
    full=_TORCH_PARTIAL,
)
lightning = with_optimizer(
    "Lightning checkpoint with optimizer and loop state: Trainer.fit(ckpt_path=...)",
    full=_TORCH_PARTIAL,
)
# Folder saves: a step's whole training state (an Orbax tree, a DCP state dict) when it holds
# optimizer state; restored by the framework that wrote it, never by us.
orbax = with_optimizer(
    "Orbax step with optimizer state: CheckpointManager.restore(step) "
    "(Keras: OrbaxCheckpoint restores it into the model)"
)
dcp = with_optimizer("DCP folder with optimizer state: dcp.load into the model and optimizer dicts")
# Large-model stacks (issue 44): each restored by its own stack from the folder
torch_ranks = with_optimizer(
    "per-rank model and optimizer files: each rank loads its own "
    "(verl's checkpoint manager, or load_state_dict of its DTensors)"
)
megatron = with_optimizer("Megatron checkpoint with optimizer state: --load the parent folder")
# A DeepSpeed tag folder is read only when every rank's files are there and whole
# (formats.deepspeed_zero): `engine.load_checkpoint(save_dir, tag)` restores each partition.
deepspeed = with_optimizer(
    "DeepSpeed tag with every rank's optimizer partition: engine.load_checkpoint(save_dir, tag)"
)
# A Hugging Face folder is `full` when optimizer.pt, scheduler.pt and trainer_state.json are all
# there (formats.hf_folder): `Trainer.train(resume_from_checkpoint=folder)` restores each.
_hf_full = with_optimizer(
    "Trainer checkpoint with optimizer, scheduler and trainer state: "
    "Trainer.train(resume_from_checkpoint=...)",
    full="no optimizer.pt, scheduler.pt and trainer_state.json all together",
)
# A PEFT adapter's Trainer checkpoint with optimizer state resumes on its base model.
_HF_ADAPTER = Resumability(
    True,
    "Trainer checkpoint of a PEFT adapter with optimizer state: "
    "Trainer.train(resume_from_checkpoint=...) on the base model with the adapter",
)


def hf_folder(facts: ResumeFacts) -> Resumability:
    verdict = _hf_full(facts)
    if verdict is not NO_OPTIMIZER and facts.kind == Kind.ADAPTER.value:
        return _HF_ADAPTER
    return verdict
