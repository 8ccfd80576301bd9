"""Model values → the checkpoint and run rows of the JSON documents (docs/cli-contract.md). Pure."""

from __future__ import annotations

import math
from typing import Any

from .metric_names import has_direction
from .model import AuditEvent, Checkpoint, Run, TrashedCheckpoint
from .units import iso_utc

# `show --json` fields beyond a listing's (stable: add, never rename or remove).
SHOW_FIELDS = (
    "layers",
    "optimizer_config",
    "training_config",
    "keras_version",
    "backend",
    "model_class",
    "model_name",
    "iterations",
    "learning_rate",
    "n_trainable_params",
    "notes",
    "signatures",
    "files",
    "codec",
    "metric_sources",
    "generation",
    "generations",  # [{generation, hash, epoch, step, iterations, indexed_at, ...}], oldest first
    "versions",  # kept copies: [{generation, path, status, current, epoch, step, hash, ...}]
    "epoch_source",  # where the epoch came from: file name, sidecar, same content, iterations
    "first_seen_at",
    "artifacts",
    "events",
    # an adapter's base model: {name, revision, path, checkpoint_id, in_root, missing}
    "base_model",
    "world_size",  # ranks that wrote a sharded save (FSDP, DeepSpeed, Megatron, DCP)
)


def checkpoint_json(c: Checkpoint, *, detailed: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": c.id,
        "path": c.path,
        "run": c.run,
        "root": c.root,
        "format": c.format,
        "kind": c.kind,
        "epoch": c.epoch,
        "step": c.step,
        "size_bytes": c.size_bytes,
        "weights_bytes": c.weights_bytes,
        "optimizer_bytes": c.optimizer_bytes,
        "optimizer": c.optimizer,
        "n_params": c.n_params,
        "status": c.status.value,
        "reason": c.reason,
        "pinned": c.pinned,
        "mtime": iso_utc(c.mtime),
        "indexed_at": c.indexed_at,
        "hash": c.hash,
        "generation": c.generation,
        "version_of": c.version_of,
        "metrics": _finite(c.metrics),
    }
    if detailed:
        for name in SHOW_FIELDS:
            doc[name] = c.details.get(name)
        doc["metric_sources"] = c.metric_sources
        # a sharded checkpoint's layout (formats.deepspeed_zero): null for one-process saves
        recorded = c.details.get("recorded")
        sharding = recorded.get("sharding") if isinstance(recorded, dict) else None
        sharding = sharding if isinstance(sharding, dict) else {}
        # DeepSpeed's in `recorded.sharding`; FSDP/verl, DCP, Megatron's in details (issue 44)
        doc["world_size"] = sharding.get("world_size") or c.details.get("world_size")
        doc["zero_stage"] = sharding.get("zero_stage")
    return doc


def run_json(r: Run) -> dict[str, Any]:
    return {
        "name": r.name,
        "root": r.root,
        "checkpoints": r.checkpoints,
        "bytes": r.bytes,
        "newest": r.newest,
        # A "best" only where one is better (not a learning rate, a runtime, a counter).
        "best": {k: v for k, v in r.best.items() if has_direction(k)},
        "naming": r.naming,
        "steps_per_epoch": r.steps_per_epoch,
        "evidence": r.evidence,
        "log_alignment": r.log_alignment,
        "last_save": iso_utc(r.newest_mtime_ns / 1e9) if r.newest_mtime_ns is not None else None,
        "last_save_failed": failed_save_json(r.last_save_failed) if r.last_save_failed else None,
    }


def failed_save_json(save: dict[str, Any]) -> dict[str, Any]:
    """A run's last save that did not complete: where, its status and why, when written."""
    at = iso_utc(save["mtime_ns"] / 1e9)
    shown = {k: save[k] for k in ("path", "status", "reason")}
    return {**shown, "at": at}


def _finite(values: dict[str, float | None]) -> dict[str, float | None]:
    """JSON has no NaN or Infinity: a metric the run logged as one is null (text shows `null`
    too, see text.metric_text; the catalog stores it as NULL)."""
    every: Any = values.values()  # a None among them raises TypeError in sum
    try:  # the common case, every value a finite number, in one C-level pass (100,000 rows)
        if math.isfinite(sum(every)):
            return dict(values)
    except TypeError:  # a None among them
        pass
    return {k: (v if v is not None and math.isfinite(v) else None) for k, v in values.items()}


def trashed_json(t: TrashedCheckpoint) -> dict[str, Any]:
    """`trash list --json` (and `trash purge --json`'s `purged`): the row, then where it went."""
    row = dict(vars(t))  # its fields in order (`dataclasses.asdict` deep-copies: 30x slower)
    trash = row.pop("trash")
    return {**row, **trash}


def event_json(e: AuditEvent) -> dict[str, Any]:
    """`log --json`: one audit event: every field of its row, in order."""
    return dict(vars(e))
