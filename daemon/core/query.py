"""What a listing asks for: filters, `--where NAME OP VALUE` conditions and sort keys. Pure."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import UsageError

OPERATORS = ("<=", ">=", "==", "!=", "<", ">")
# Keys that name catalog columns; any other key in --where/--sort names a metric.
COLUMN_KEYS = {
    "id": "id",
    "epoch": "epoch",
    "step": "step",
    "size": "size_bytes",
    "size_bytes": "size_bytes",
    "weights_bytes": "weights_bytes",
    "optimizer_bytes": "optimizer_bytes",
    "n_params": "n_params",
    "iterations": "iterations",
    "mtime": "mtime_ns",
    "indexed_at": "indexed_at",
    "path": "path",
}
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.\-/]*)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
# Keras's ModelCheckpoint `mode="auto"`: these metrics improve upwards.
_MAX_HINTS = ("acc", "auc", "precision", "recall", "f1")


@dataclass(frozen=True)
class Condition:
    key: str
    op: str
    value: float

    @property
    def column(self) -> str | None:
        return COLUMN_KEYS.get(self.key)


@dataclass(frozen=True)
class ListQuery:
    run: str | None = None
    root: str | None = None
    format: str | None = None
    status: str | None = None
    kind: str | None = None
    where: tuple[Condition, ...] = ()
    sort: str = "mtime"
    descending: bool = False
    limit: int | None = None
    # What the ordinary views leave out (`ckpt list` and the API's `list()` without --versions /
    # --status): kept versions of rewritten files (each folded under its file, with a count)
    # and the rows of files that are no longer where they were (OFF_DISK). The defaults here
    # keep every row: retention, history and verify read the whole run.
    versions: bool = True
    off_disk: bool = True


# Statuses of rows whose file is gone from its path by our hand or its trainer's: listed only
# when asked for by --status (a missing file is an anomaly, and stays in the ordinary views).
OFF_DISK = ("trashed", "purged", "removed")


def parse_condition(text: str) -> Condition:
    """`"val_loss < 0.3"` → Condition. Sizes accept the same units as config (`size > 1GB`)."""
    match = _CONDITION.match(text)
    if not match:
        raise UsageError(
            f"--where {text!r}: expected NAME OP VALUE with OP one of {' '.join(OPERATORS)}"
        )
    key, op, raw = match.groups()
    return Condition(key, op, _number(key, raw))


def _number(key: str, raw: str) -> float:
    if COLUMN_KEYS.get(key, "").endswith("bytes"):
        from .units import parse_size

        try:
            return float(parse_size(raw))
        except ValueError as exc:
            raise UsageError(f"--where {key}: {exc}") from None
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"--where {key}: {raw!r} is not a number") from None
    if not math.isfinite(value):  # the catalog holds finite metrics only (NaN, inf are null)
        raise UsageError(f"--where {key}: {raw!r} is not a finite number")
    return value


def default_mode(metric: str) -> str:
    """`max` for accuracy-like metrics, `min` otherwise (as Keras's `monitor` mode "auto")."""
    lowered = metric.lower()
    return "max" if any(hint in lowered for hint in _MAX_HINTS) else "min"


# Sort keys that name catalog columns beyond COLUMN_KEYS (text columns).
TEXT_SORT_KEYS = ("run", "format", "status", "kind")


def metric_keys(query: ListQuery) -> list[tuple[str, str]]:
    """The (option, key) of every `--where`/`--sort` key that names a metric, not a column:
    each must be a metric the catalog holds (a typo, `val_los`, would match nothing and look
    like an empty answer)."""
    keys = [(f"--where {c.key!r}", c.key) for c in query.where if c.column is None]
    if query.sort not in COLUMN_KEYS and query.sort not in TEXT_SORT_KEYS:
        keys.append((f"--sort {query.sort!r}", query.sort))
    return keys


def unknown_key(what: str, metric_names: Iterable[str], *, columns: bool = True) -> str:
    """The message for a key that is neither a column nor a metric any checkpoint has."""
    metrics = ", ".join(sorted(metric_names)) or "none yet"
    if not columns:
        return f"{what}: no checkpoint in the catalog has this metric (metrics: {metrics})"
    known = ", ".join([*COLUMN_KEYS, *TEXT_SORT_KEYS])
    return f"{what}: not a column or a metric in the catalog (columns: {known}; metrics: {metrics})"
