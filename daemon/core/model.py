"""Plain data and vocabularies shared by every layer: what a checkpoint is (as the catalog and
the API see it), its formats and statuses, and the work items the service hands around.

No I/O here, no clock: these are frozen values that cross module boundaries.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


class CheckpointStatus(enum.StrEnum):
    OK = "ok"
    INCOMPLETE = "incomplete"  # seen, not (yet) complete
    # A folder save in flight that nobody finishes: no writer, untouched past
    # `completion.abandoned_after` (core.save_verdict)
    ABANDONED = "abandoned"
    CORRUPT = "corrupt"
    UNREADABLE = "unreadable"
    MISSING = "missing"
    REMOVED = "removed"  # deleted by its own trainer (rotation, crash-recovery state), not lost
    TRASHED = "trashed"
    PURGED = "purged"
    # A kept copy (`version_of` set) of the generation its file holds now: a version, shown and
    # judged by retention, only once the file is rewritten or gone (usecases.versions).
    STANDBY = "standby"


class _Formats(type):
    """`for f in Format`: every format known, built in or added by a row of `core.families`."""

    def __iter__(cls) -> Iterator[Format]:
        return iter(tuple(_KNOWN.values()))


class Format(str, metaclass=_Formats):
    """A checkpoint's format: the value is what the catalog stores and `--json` prints.

    An open vocabulary: a format is one row of `core.families` (`core.families.register` adds
    one), not a member of a closed enum. `Format(value)` answers the one object of a known
    value (so `is` compares as it did for the enum) and refuses an unknown one (ValueError)."""

    __slots__ = ()
    KERAS_ZIP: ClassVar[Format]
    KERAS_WEIGHTS_H5: ClassVar[Format]
    KERAS_LEGACY_H5: ClassVar[Format]
    KERAS_LEGACY_WEIGHTS_H5: ClassVar[Format]
    TF_CHECKPOINT: ClassVar[Format]
    SAVED_MODEL: ClassVar[Format]
    TORCH_ZIP: ClassVar[Format]
    TORCH_LEGACY: ClassVar[Format]
    LIGHTNING: ClassVar[Format]
    SAFETENSORS: ClassVar[Format]
    ORBAX: ClassVar[Format]
    TORCH_DCP: ClassVar[Format]
    HF_FOLDER: ClassVar[Format]
    TORCH_RANKS: ClassVar[Format]
    MEGATRON_DIST: ClassVar[Format]
    MEGATRON_LEGACY: ClassVar[Format]
    DEEPSPEED_ZERO: ClassVar[Format]

    def __new__(cls, value: str) -> Format:
        known = _KNOWN.get(value)
        if known is None:
            raise ValueError(f"{value!r} is not a known format")
        return known

    @classmethod
    def add(cls, value: str) -> Format:
        """The format `value`, known from now on (idempotent)."""
        if value not in _KNOWN:
            _KNOWN[value] = str.__new__(cls, value)
        return _KNOWN[value]

    @classmethod
    def forget(cls, value: str) -> None:
        """`value` is no format any more (a toy format's row, unregistered)."""
        _KNOWN.pop(value, None)

    @classmethod
    def known(cls) -> Mapping[str, Format]:
        """{value: format} of every known format (live: it grows as formats are added)."""
        return _KNOWN

    @property
    def value(self) -> str:
        return str.__str__(self)


_KNOWN: dict[str, Format] = {}
Format.KERAS_ZIP = Format.add("keras-v3-zip")  # Keras 3 (or tf-keras) `.keras` archive
Format.KERAS_WEIGHTS_H5 = Format.add("keras-v3-weights-h5")  # Keras 3 `.weights.h5`
Format.KERAS_LEGACY_H5 = Format.add("keras-legacy-h5")  # `model.save('x.h5')`, Keras 2 or 3
Format.KERAS_LEGACY_WEIGHTS_H5 = Format.add("keras-legacy-weights-h5")  # tf-keras save_weights
Format.TF_CHECKPOINT = Format.add("tf-checkpoint")  # `prefix.index` + `prefix.data-*`
Format.SAVED_MODEL = Format.add("savedmodel")  # a directory with `saved_model.pb`
# `torch.save` (>= 1.6): a zip of `*/data.pkl` + `*/data/<key>`
Format.TORCH_ZIP = Format.add("torch-zip")
# `torch.save(..., _use_new_zipfile_serialization=False)`
Format.TORCH_LEGACY = Format.add("torch-legacy")
Format.LIGHTNING = Format.add("lightning-ckpt")  # a torch zip holding a Lightning checkpoint
Format.SAFETENSORS = Format.add("safetensors")  # 8-byte header length, JSON header, tensors
# an Orbax step folder `<dir>/<step>/` (`_CHECKPOINT_METADATA`, items)
Format.ORBAX = Format.add("orbax-step")
# torch.distributed.checkpoint: `.metadata` + `__R_N.distcp` files
Format.TORCH_DCP = Format.add("torch-dcp")
# A Hugging Face folder: a Trainer `checkpoint-N/` or a `save_pretrained` model (sharded too)
Format.HF_FOLDER = Format.add("hf-folder")
# Large-model stacks (issue 44): a folder of per-rank torch files (FSDP2 / verl
# `model_world_size_W_rank_R.pt`), a Megatron `iter_N/` of torch_dist (DCP + `common.pt` +
# `metadata.json`) or of the legacy `mp_rank_XX/model_optim_rng.pt`
Format.TORCH_RANKS = Format.add("torch-rank-files")
Format.MEGATRON_DIST = Format.add("megatron-torch-dist")
Format.MEGATRON_LEGACY = Format.add("megatron-legacy")
# A DeepSpeed ZeRO tag folder `global_stepN/`: per-rank model and optimizer states
Format.DEEPSPEED_ZERO = Format.add("deepspeed-zero")


class Kind(enum.StrEnum):
    FULL = "full"  # architecture + weights (+ optimizer state when present)
    WEIGHTS = "weights"  # weights only, no architecture
    # A PEFT adapter (LoRA, ...): its own small weights, loaded on top of its base model
    # (formats.peft_adapter; `details["base_model"]` is its lineage, usecases.lineage)
    ADAPTER = "adapter"


@dataclass(frozen=True)
class WeightInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Layer:
    name: str
    class_name: str | None
    n_params: int
    weights: tuple[WeightInfo, ...] = ()


@dataclass(frozen=True)
class OptimizerInfo:
    class_name: str | None  # None when the file records only the optimizer's instance name
    name: str | None = None
    config: dict[str, Any] | None = None
    iterations: int | None = None
    learning_rate: float | None = None  # the stored variable, when there is one
    n_variables: int = 0
    state_bytes: int = 0


@dataclass(frozen=True)
class CheckpointInfo:
    """What a format reader learned from a checkpoint's metadata (weights are never read)."""

    format: Format
    kind: Kind
    model_class: str | None = None
    model_name: str | None = None
    keras_version: str | None = None
    backend: str | None = None
    layers: tuple[Layer, ...] = ()
    n_params: int | None = None
    n_trainable_params: int | None = None
    weights_bytes: int | None = None
    optimizer: OptimizerInfo | None = None
    training_config: dict[str, Any] | None = None
    signatures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # facts a user should know, e.g. "resume unreliable in Keras 3"
    # What the file records of its own training progress, as plain JSON: {"epoch", "step",
    # "metrics": {name: value}} (torch dicts, Lightning); derivation takes it like a sidecar.
    recorded: dict[str, Any] | None = None
    # How many ranks wrote a sharded save (its files' names and metadata declare it)
    world_size: int | None = None


@dataclass(frozen=True)
class MetricValue:
    name: str
    value: float
    source: str  # "filename", "csv:training.log", "sidecar:x.json", ...


@dataclass(frozen=True)
class FileStat:
    """What identifies the bytes of a file (or of a multi-file checkpoint, summed)."""

    size: int
    mtime_ns: int
    inode: int | None


@dataclass(frozen=True)
class IndexRecord:
    """The indexer's verdict on one checkpoint path, ready for the catalog."""

    path: str
    root: str
    run: str
    status: CheckpointStatus
    reason: str | None
    stat: FileStat
    hash: str | None = None
    info: CheckpointInfo | None = None
    epoch: int | None = None
    step: int | None = None
    metrics: tuple[MetricValue, ...] = ()
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # member files of a multi-file checkpoint, relative to its folder
    # How far the run's epoch log had got when these bytes were read: (highest logged epoch, the
    # log not written since the file's mtime); None: the run has no epoch log.
    sighting: tuple[int | None, bool] | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A catalog row as the API returns it."""

    id: int
    path: str
    run: str
    root: str
    format: Format | None
    kind: str | None
    status: CheckpointStatus
    reason: str | None
    size_bytes: int
    mtime: float
    inode: int | None
    hash: str | None
    indexed_at: str | None
    epoch: int | None = None
    step: int | None = None
    weights_bytes: int | None = None
    optimizer_bytes: int | None = None
    optimizer: str | None = None
    n_params: int | None = None
    pinned: bool = False
    generation: int = 1  # of the file at `path`; for a version, the generation it keeps
    version_of: str | None = None  # a version kept of a rewritten file: that file's path
    metrics: dict[str, float | None] = field(default_factory=dict)  # None: logged as NaN
    metric_sources: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # layers, configs, notes: `show` only
    # Versions kept of this file, folded under it by the ordinary listings (0 where not counted)
    versions_kept: int = 0


@dataclass(frozen=True)
class Run:
    name: str
    root: str
    checkpoints: int
    bytes: int
    newest: str | None
    best: dict[str, str] = field(default_factory=dict)
    id: int | None = None
    # The run's file-naming schemes: [{template, origin, members, evidence}] (core.naming).
    naming: list[dict[str, Any]] = field(default_factory=list)
    steps_per_epoch: int | None = None  # learned from optimizer iterations, when unambiguous
    evidence: list[str] = field(default_factory=list)  # how steps_per_epoch was (not) learned
    # Which checkpoint a 0-based log row is (core.log_alignment): {offset, epoch_streams, why}
    log_alignment: dict[str, Any] | None = None
    newest_mtime_ns: int | None = None  # the newest ok checkpoint's mtime: the run's last save
    best_values: dict[str, float] = field(default_factory=dict)  # metric -> the best's value
    # {status: count} of the statuses that flag a run (incomplete, abandoned, corrupt, ...)
    flags: dict[str, int] = field(default_factory=dict)
    # The newest mtime of a save that did not complete (incomplete or abandoned), if any
    unfinished_mtime_ns: int | None = None

    @property
    def last_save_unfinished(self) -> bool:
        """Is the run's newest save one that did not complete (newer than every ok one)?"""
        unfinished, ok = self.unfinished_mtime_ns, self.newest_mtime_ns
        return unfinished is not None and (ok is None or unfinished > ok)

    # The run's last save, when it did not complete (abandoned or corrupt, after its newest ok
    # checkpoint): {path, status, reason, mtime_ns}; None when it did.
    last_save_failed: dict[str, Any] | None = None


# ---- work items: what the watcher and the scheduler hand to the service's one worker ----


class HintKind(enum.StrEnum):
    CLOSED = "closed"  # a writer closed the file after writing (IN_CLOSE_WRITE)
    MOVED = "moved"  # renamed onto this path (TF state files, SavedModel, our own rewrites)
    CHANGED = "changed"  # created or modified: still being written, maybe
    DELETED = "deleted"
    OVERFLOW = "overflow"  # the event queue lost events: only a rescan tells the truth


@dataclass(frozen=True)
class Hint:
    """A filesystem event: a hint that `path` may have changed, never proof of anything."""

    path: str
    kind: HintKind
    is_dir: bool = False


@dataclass(frozen=True)
class Rescan:
    """Walk and reconcile with the catalog: `target` (a path in a root), or every root."""

    reason: str
    target: str | None = None


class JobName(enum.StrEnum):
    """Every background job, by the name the config's `schedule:` section and the logs use."""

    RESCAN = "rescan"  # walk the roots (the worker's own work, queued as a `Rescan`)
    RETENTION = "retention"  # the configured retention policies
    PURGE = "purge"  # empty the trash of what is older than `trash.purge_after`
    VERIFY = "verify"  # re-hash every ok checkpoint
    ARTIFACTS = "artifacts"  # split and compress cold checkpoints
    REMOTE_VERIFY = "remote_verify"  # read back a sample of the verified remote copies


@dataclass(frozen=True)
class Job:
    """A scheduled job for the service's jobs thread (every job but the rescan)."""

    name: JobName


# ---- what the catalog's audit and trash reads return (JSON shapes: core.views) ----


@dataclass(frozen=True)
class TrashedCheckpoint:
    """A checkpoint in the trash: where it was (`path`), and `trash`: where its files went
    (`paths`), when (`at`), in which `batch`, and the `members` it was made of."""

    id: int
    path: str
    run: str
    root: str
    bytes: int
    reason: str | None
    pinned: bool
    trash: dict[str, Any] = field(default_factory=dict)

    @property
    def trash_paths(self) -> list[str]:
        return list(self.trash.get("paths", []))

    @property
    def trashed_at(self) -> str:
        return str(self.trash.get("at", ""))


@dataclass(frozen=True)
class AuditEvent:
    """One row of the audit log: an act (index, trash, restore, purge, pin, split, ...), its
    state (planned, done, failed, abandoned), why, how many bytes, and who."""

    id: int
    at: str
    action: str
    state: str
    checkpoint_id: int | None
    run: str | None
    path: str
    reason: str | None
    bytes: int | None
    actor: str
    node: str | None = None  # the `service.node` of the process that acted (None: before 0007)


@dataclass(frozen=True)
class Heartbeat:
    """A daemon's latest sign of life: who (pid, host), since when, and its `state` document
    (roots, queue, jobs, last error, ... as the daemon wrote it)."""

    pid: int
    host: str
    started_at: str
    heartbeat_at: str
    state: dict[str, Any] = field(default_factory=dict)
    node: str | None = None  # `service.node`; None for rows of daemons before nodes
    id: int | None = None
