"""TensorFlow checkpoints (`prefix.index` + `prefix.data-XXXXX-of-NNNNN`): metadata only.

Read in-process without TensorFlow: `formats.tensor_bundle` parses the index and the few tensors
needed, `formats.tf_variables` reports each variable with its role (model weight, optimizer
state, other), decided from the checkpoint's object graph; this module adds them up into a
`CheckpointInfo`.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint, UnreadableCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from ..fs import beneath
from . import tf_variables

TABLE_MAGIC = tf_variables.tensor_bundle.TABLE_MAGIC  # the last 8 bytes of every `.index`
FOOTER_LEN = tf_variables.tensor_bundle.FOOTER_LEN
_SHARD = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
_ITERATIONS = {"iteration", "iterations", "_iterations", "iter"}
_LEARNING_RATE = {"learning_rate", "_learning_rate", "lr"}


# -- file-level checks (no TF) ------------------------------------------------------------------


def shard_paths(prefix: Path) -> list[Path]:
    """The data shards the index implies, judged by the names present in its folder."""
    found: dict[int, list[Path]] = {}
    if prefix.parent.is_dir():
        for p in prefix.parent.iterdir():
            m = _SHARD.search(p.name)
            if m and p.name[: m.start()] == prefix.name:
                found.setdefault(int(m.group(2)), []).append(p)
    # Several "of-N" families only happen when a rewrite left stale files: trust the newest.
    total = max(found, key=lambda n: max(_mtime(p) for p in found[n]), default=1)
    return [prefix.with_name(f"{prefix.name}.data-{i:05d}-of-{total:05d}") for i in range(total)]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def check_files(prefix: Path) -> list[Path]:
    """Raise unless `prefix.index` looks like a TF table and every data shard is present."""
    index = prefix.with_name(prefix.name + ".index")
    try:
        with os.fdopen(beneath.open_regular(index), "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size >= FOOTER_LEN:
                f.seek(size - 8)
                magic = int.from_bytes(f.read(8), "little")
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{index.name} missing") from None
    except beneath.NotARegularFile as exc:  # TensorFlow would follow it: never read
        raise UnreadableCheckpoint(str(exc)) from None
    except OSError as exc:
        raise UnreadableCheckpoint(f"{index.name}: {exc.strerror or exc}") from None
    if size < FOOTER_LEN or magic != TABLE_MAGIC:
        raise CorruptCheckpoint("index file truncated or not a TF checkpoint index")
    shards = shard_paths(prefix)
    for shard in shards:
        problem = beneath.not_regular(shard)
        if problem == "missing":
            raise CorruptCheckpoint(f"data shard {shard.name.rsplit('.data-', 1)[1]} missing")
        if problem:
            raise UnreadableCheckpoint(f"{shard.name} is {problem}: not read")
    return shards


# -- turning probe facts into a CheckpointInfo (pure) ----------------------------------------------


@dataclass(frozen=True)
class _Var:
    """One variable as `tf_variables` reports it (role decided from the object graph)."""

    key: str  # checkpoint key without "/.ATTRIBUTES/VARIABLE_VALUE"
    name: str  # the variable's own name when known: "fc1/kernel", "adam/iteration"
    role: str  # "model" | "optimizer" | "other"
    trainable: bool
    shape: tuple[int, ...]
    dtype: str
    itemsize: int  # 0 for strings and resources
    value: Any  # numeric scalars only

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def called(self, wanted: set[str]) -> bool:
        return self.value is not None and bool(
            {self.key.rsplit("/", 1)[-1], self.name.rsplit("/", 1)[-1]} & wanted
        )

    def label(self) -> str:
        # The full name is clearer ("seed_generator/seed_generator_state") unless generic.
        text = self.name if "/" in self.name else self.key
        return text if self.value is None else f"{text}={self.value:g}"


def _layers(weights: list[_Var]) -> tuple[Layer, ...]:
    groups: dict[str, list[_Var]] = {}
    for var in weights:
        groups.setdefault(var.name.rsplit("/", 1)[0], []).append(var)
    return tuple(
        Layer(
            owner,
            None,
            sum(v.size for v in vs),
            tuple(WeightInfo(v.name, v.shape, v.dtype) for v in vs),
        )
        for owner, vs in groups.items()
    )


def _optimizer(state: list[_Var], steps: _Var | None, named: bool) -> OptimizerInfo | None:
    if not state:
        return None
    prefixes = Counter(v.name.split("/", 1)[0] for v in state if "/" in v.name)
    steps = next((v for v in state if v.called(_ITERATIONS)), steps)
    lr = next((v for v in state if v.called(_LEARNING_RATE)), None)
    return OptimizerInfo(
        class_name=None,  # TF checkpoints record only instance names ("adam", "Adam")
        name=prefixes.most_common(1)[0][0] if prefixes and named else None,
        iterations=None if steps is None else int(steps.value),
        learning_rate=None if lr is None else float(lr.value),
        n_variables=len(state),
        state_bytes=sum(v.nbytes for v in state),
    )


def _dedupe(weights: list[_Var]) -> list[_Var]:
    seen: dict[tuple[str, tuple[int, ...], str], _Var] = {}
    for var in weights:
        seen.setdefault((var.name, var.shape, var.dtype), var)
    return list(seen.values())


def describe(
    result: dict[str, Any], *, fmt: Format, kind: Kind, data_bytes: int, dedupe: bool = False
) -> CheckpointInfo:
    """A CheckpointInfo from a `tf_variables.probe_checkpoint` result (pure: no I/O)."""
    found = [_Var(**{**v, "shape": tuple(v["shape"])}) for v in result["variables"]]
    needed = sum(v.nbytes for v in found) + result["graph_bytes"]
    if data_bytes < needed:  # tensors are stored back to back, unpadded
        raise CorruptCheckpoint(
            f"data shards hold {data_bytes:,} bytes but the index lists {needed:,} (truncated?)"
        )
    notes = []
    if not result["object_graph"]:
        notes.append(
            "no object graph (TF1-style checkpoint): weights and optimizer state told "
            "apart by variable names, which may be wrong"
        )
    stored = [v for v in found if v.role == "model"]
    weights = _dedupe(stored) if dedupe else stored
    if len(weights) < len(stored):
        notes.append(
            f"{len(stored) - len(weights)} variables are stored twice under different "
            "keys (Keras 3 model.export layout); parameters counted once"
        )
    other = [v for v in found if v.role == "other" and v.itemsize]  # not config strings
    if other:
        shown = ", ".join(v.label() for v in other[:5])
        notes.append(f"not model weights: {shown}" + (" …" if other[5:] else ""))
    # TF1 Saver checkpoints count steps in `global_step`, outside the optimizer.
    steps = next((v for v in other if v.called({"global_step"})), None)
    return CheckpointInfo(
        format=fmt,
        kind=kind,
        layers=_layers(weights),
        n_params=sum(v.size for v in weights),
        n_trainable_params=sum(v.size for v in weights if v.trainable) or None,
        weights_bytes=sum(v.nbytes for v in weights),
        optimizer=_optimizer(
            [v for v in found if v.role == "optimizer"], steps, named=result["object_graph"]
        ),
        notes=tuple(notes),
    )


# -- the reader ------------------------------------------------------------------------------------


def read(prefix: Path, *, timeout: float = 120.0) -> CheckpointInfo:
    """Metadata of the TF checkpoint `prefix` (the path without `.index`). `timeout` is kept
    for callers: the read is in-process and bounded by its size caps."""
    del timeout
    shards = check_files(prefix)
    try:
        data_bytes = sum(p.stat().st_size for p in shards)
        result = tf_variables.probe_checkpoint(prefix)
    except (OSError, beneath.NotARegularFile) as exc:  # max_to_keep pruning it right now
        raise tf_variables.read_problem(prefix, exc) from None
    return describe(result, fmt=Format.TF_CHECKPOINT, kind=Kind.WEIGHTS, data_bytes=data_bytes)
