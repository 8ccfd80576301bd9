"""Which remote copies are never given up (pure): the copy of a pinned checkpoint, or of one its
run would lose as its newest, its best by a metric or its last resumable checkpoint.

The run is judged over the checkpoints whose bytes still exist somewhere (at their path, or in
a verified remote copy): a tiered checkpoint is no longer `ok`, so retention's own rules (over
`ok` rows) would not see that its remote copy is now the run's only copy of its newest save.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from .model import Checkpoint
from .moments import progress_key, rewritten_in_place
from .query import default_mode
from .resume import optimizer_config_lost, resumability


def why_kept(
    target: Checkpoint, run: Sequence[Checkpoint], available: Collection[int]
) -> str | None:
    """Why `target`'s remote copy must stay (None: it may go to the store's trash). `run`: the
    rows of its run; `available`: the ids among them whose bytes exist somewhere."""
    if target.pinned:
        return "it is pinned"
    alive = [c for c in run if c.id in available and c.version_of is None]
    if target.id not in {c.id for c in alive}:
        alive.append(target)
    if max(alive, key=progress_key).id == target.id:
        return "it is its run's newest checkpoint"
    if max(alive, key=lambda c: (c.mtime, c.id)).id == target.id:
        return "it is its run's most recently written checkpoint"
    for metric in sorted({m for c in alive for m in c.metrics}):
        best = _best(alive, metric)
        if best is not None and best.id == target.id:
            return f"it is its run's best by {metric}"
    resumable = [c for c in alive if _resumable(c)]
    if resumable and max(resumable, key=progress_key).id == target.id:
        return "it is its run's last resumable checkpoint"
    return None


def _best(rows: Sequence[Checkpoint], metric: str) -> Checkpoint | None:
    sign = 1.0 if default_mode(metric) == "min" else -1.0
    valued = []
    for c in rows:
        value = c.metrics.get(metric)
        if isinstance(value, int | float) and math.isfinite(value):
            # ties as retention's keep_best: the file no trainer rewrites, then the newest
            stable = rewritten_in_place(c.path.rsplit("/", 1)[-1], c.generation)
            valued.append((sign * float(value), stable, -c.mtime, -c.id, c))
    return min(valued, key=lambda v: v[:4])[4] if valued else None


def _resumable(c: Checkpoint) -> bool:
    verdict = resumability(
        c.format,
        c.kind,
        c.optimizer_bytes,
        _text(c.details.get("keras_version")),
        optimizer_config_lost=optimizer_config_lost(c.format, c.details),
    )
    return verdict.resumable


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
