"""What an `IndexRecord` writes into its `checkpoints` row (`Index.record`): the plain columns
the queries filter and sort by, `details` (layers, configs, notes: what `show` prints), and the
row's sightings of each generation of the file (what run derivation learns epochs from)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.model import CheckpointStatus, IndexRecord
from .store_runs import dedupe

# A file rewritten every epoch for a year stays a bounded row: the oldest generations go first.
MAX_GENERATIONS = 1000


def row_values(rec: IndexRecord, now: str) -> dict[str, Any]:
    info = rec.info
    opt = info.optimizer if info else None
    values: dict[str, Any] = {
        "path": rec.path,
        "status": rec.status.value,
        "reason": rec.reason,
        "size_bytes": rec.stat.size,
        "mtime_ns": rec.stat.mtime_ns,
        "inode": rec.stat.inode,
        "hash": rec.hash,
        "epoch": rec.epoch,
        "step": rec.step,
        "indexed_at": now if rec.status == CheckpointStatus.OK else None,
        "format": info.format.value if info else None,
        "kind": info.kind.value if info else None,
        "weights_bytes": info.weights_bytes if info else None,
        "optimizer_bytes": opt.state_bytes if opt else (0 if info else None),
        "optimizer": (opt.class_name or opt.name) if opt else None,
        "iterations": opt.iterations if opt else None,
        "n_params": info.n_params if info else None,
        "n_trainable_params": info.n_trainable_params if info else None,
        "model_class": info.model_class if info else None,
        "model_name": info.model_name if info else None,
        "keras_version": info.keras_version if info else None,
        "backend": info.backend if info else None,
    }
    values["details"] = _details(rec)
    return values


def sightings(
    seen: list[dict[str, Any]], rec: IndexRecord, generation: int, now: str
) -> list[dict[str, Any]]:
    """The generations of the file seen so far, oldest first, with this one (a new hash, or the
    first read with a hash) added: what derivation learns epochs of rewritten files from."""
    if rec.hash is None or (seen and seen[-1].get("hash") == rec.hash):
        return seen
    opt = rec.info.optimizer if rec.info else None
    log_epochs, log_before = rec.sighting if rec.sighting else (None, False)
    entry = {
        "generation": generation,
        "hash": rec.hash,
        "iterations": opt.iterations if opt else None,
        "mtime_ns": rec.stat.mtime_ns,
        "indexed_at": now,
        "log_epochs": log_epochs,
        "log_before": log_before,
        "epoch": None,
        "step": None,
    }
    recorded = rec.info.recorded if rec.info else None
    if isinstance(recorded, dict) and recorded:  # the generation's own epoch, step, metrics:
        entry["recorded"] = recorded  # what its kept copy carries (store_versions.add_version)
    return [*seen, entry][-MAX_GENERATIONS:]


def _details(rec: IndexRecord) -> dict[str, Any]:
    info = rec.info
    reader_notes = list(info.notes) if info else []
    details: dict[str, Any] = {
        "notes": list(rec.notes) + reader_notes,
        "reader_notes": reader_notes,
        "metric_sources": {m.name: m.source for m in dedupe(rec.metrics)},
    }
    if rec.files:
        details["files"] = list(rec.files)
    if info is None:
        return details
    opt = info.optimizer
    details.update(
        layers=[dataclasses.asdict(layer) for layer in info.layers],
        optimizer_config=opt.config if opt else None,
        optimizer_name=opt.name if opt else None,
        optimizer_variables=opt.n_variables if opt else 0,
        learning_rate=opt.learning_rate if opt else None,
        training_config=info.training_config,
        signatures=list(info.signatures),
    )
    if info.recorded is not None:
        details["recorded"] = info.recorded
    if info.world_size is not None:
        details["world_size"] = info.world_size
    return details
