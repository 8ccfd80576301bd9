"""What the service tells operators, decided without I/O: the catalog's figures for the Prometheus
metrics (`Figures`), the byte kind of a row, the latency histogram's buckets, the monitored
metric of a run (for the `new_best` hook) and the JSON document a hook command reads. Pure."""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .versions import is_version_path

# The byte kinds of `ckpt_bytes{kind}`: a closed set (the label's cardinality is 4 per root).
BYTE_KINDS = ("checkpoint", "inference_artifact", "version", "trash")
# Seconds from a file's mtime to its indexed row: Keras writes, the worker waits for the file to
# settle (settle_seconds, 5 s by default) and reads it; a daemon that was down sees old files.
LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, math.inf)
# The audit actions counted by the `ckpt_<what>_total` counters (done events only).
COUNTED_ACTIONS = {"indexed": "indexed", "trashed": "trash", "purged": "purge"}
COUNTED_ACTIONS.update(split="split")  # compressed: only those that shrank (NOT_SMALLER)
# A generation not kept as a version for lack of space (usecases.versions).
COUNTED_ACTIONS.update(capture_skipped="capture-skipped")
COUNTED_ACTIONS.update(tiered="tier")  # uploaded, verified, recorded (its failures: tier failed)
# A trash done by retention's budget that replaced a checkpoint by its inference artifact
# (core.retention's reason text) is a demotion.
DEMOTED_REASON = "demoted to its inference artifact"
# The codec recorded for a compress that would not shrink the file (usecases.artifacts).
NOT_SMALLER = "not smaller: "
HOOK_EVENTS = (
    "new_best",
    "corrupt",
    "disk_pressure",
    "retention",
    "tiered",
    "save_failed",
    "stage_failed",
)


def iso_seconds(iso: str) -> float:
    """Seconds since the epoch of a catalog time (`core.units.iso_utc`'s format)."""
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def byte_kind(path: str, trashed: bool) -> str:
    """The `kind` label of a catalog row's bytes."""
    if trashed:
        return "trash"
    return "version" if is_version_path(path) else "checkpoint"


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts (upper bound -> count of observations <= it), sum and count."""

    buckets: tuple[tuple[float, int], ...]
    total: float
    count: int


def histogram(values: Iterable[float], bounds: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
    """Prometheus histogram buckets of `values` (negative ones, a clock skew, count as 0)."""
    counts = [0] * len(bounds)
    total, count = 0.0, 0
    for value in values:
        value = max(0.0, value)
        counts[bisect.bisect_left(bounds, value)] += 1
        total += value
        count += 1
    cumulative, running = [], 0
    for bound, n in zip(bounds, counts, strict=True):
        running += n
        cumulative.append((bound, running))
    return Histogram(tuple(cumulative), total, count)


@dataclass(frozen=True)
class Figures:
    """The catalog's part of the metrics, as of one read (`UsageReads.figures`)."""

    by_status: Mapping[str, int]  # checkpoint rows per status (every status, zeros included)
    bytes: Mapping[tuple[str, str], int]  # (root, kind) -> bytes, every kind of every root
    totals: Mapping[str, int]  # "indexed", "trashed", ... -> done audit events (all time)
    failed: Mapping[str, int]  # audit action -> failed events (all time)
    latency: Histogram = field(default_factory=lambda: histogram(()))
    remote_bytes: Mapping[str, int] = field(default_factory=dict)  # root -> verified copies
    uploaded_bytes: int = 0  # bytes of every tier act done (all time)


def monitored_metric(keep_best: Iterable[str], logged: Iterable[str]) -> str | None:
    """The metric a run is judged by: its first keep_best metric, else val_loss if it logs it."""
    for metric in keep_best:
        return metric
    return "val_loss" if "val_loss" in set(logged) else None


def is_better(value: float, best_other: float | None, mode: str) -> bool:
    """Is `value` strictly better than the best of the run's other checkpoints (None: none)?"""
    if not math.isfinite(value):
        return False
    if best_other is None:
        return True
    return value < best_other if mode == "min" else value > best_other


def hook_document(
    event: str,
    *,
    at: str,
    path: str | None = None,
    run: str | None = None,
    metric: str | None = None,
    value: float | None = None,
    reason: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The JSON a hook command reads on stdin: always every field, null when it does not apply."""
    return {
        "event": event,
        "path": path,
        "run": run,
        "metric": metric,
        "value": value,
        "reason": reason,
        "at": at,
        **extra,
    }
