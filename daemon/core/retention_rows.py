"""The retention planner's rows: `Item`, one checkpoint as the planner sees it, and `Decision`,
what a plan does with it. Pure values, shared by `core.retention` and the modules it consults
(`core.newest`, `core.tier_plan`, `core.best_twins`), and built by `usecases.retention_plan`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

NO_REMOTE = "no `remote:` configured for its root"


@dataclass(frozen=True)
class Item:
    """One checkpoint as the planner sees it."""

    id: int
    path: str
    status: str  # a CheckpointStatus value
    mtime: float  # seconds since the epoch (UTC)
    size_bytes: int
    epoch: int | None = None
    step: int | None = None
    pinned: bool = False
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    # The size of its inference artifact if it can be demoted to one (split), else None.
    inference_bytes: int | None = None
    protected: str | None = None  # kept whatever the rules say, for this reason
    tier_blocked: str | None = NO_REMOTE  # why it cannot go to the object store (None: it can)
    trash_reason: str | None = None  # why it goes if nothing keeps it (an abandoned save's)
    where: str = "local"  # local | remote (only in the object store: status given as ok) | both
    # Training can resume from it (`core.resume`): the newest such one is never trashed.
    resumable: bool = False
    # Why its trainer will save to it again (a rolling pointer such as `last.pt`, Lightning's
    # `last.ckpt`): never trashed while it is the trainer's file. None: no such file.
    trainer_file: str | None = None
    # A kept copy of a rewritten file (`.ckpt-versions`): never a training moment, never
    # "newest"; planned by the versions' own policy (`usecases.retention_plan`).
    copy: bool = False
    # (epoch, step) this checkpoint of unknown progress is placed at by its save time
    # (`core.newest.placed_by_save_time`); None: not placed (its epoch or step is known, or
    # none is).
    placed: tuple[float, float] | None = None

    def value(self, metric: str) -> float | None:
        """Its value of `metric`; None when it has none, or NaN."""
        value = self.metrics.get(metric)
        return None if value is None or math.isnan(value) else float(value)


def best_first(metric: str, mode: str) -> Callable[[Item], tuple[float, bool, float, int]]:
    """The sort key of "best by `metric`" that retention's keep_best, the disk guard and
    keep_local share, so that all three protect the same checkpoint: the best value first (`mode`
    "min" or "max"; items without a value are left out by the caller); on a tie the file no
    trainer rewrites (`ckpt_epoch003.pt` beside the `best.pt` saved with it: a resumed trainer
    overwrites `best.pt` with a worse model, keras#17012), then the newest."""
    sign = 1.0 if mode == "min" else -1.0
    return lambda item: (
        sign * (item.value(metric) or 0.0),
        item.trainer_file is not None,
        -item.mtime,
        -item.id,
    )


@dataclass(frozen=True)
class Decision:
    id: int
    path: str
    # "keep" | "trash" | "demote" (by its inference artifact) | "tier" (to the store) |
    # "trash-remote" (a tiered checkpoint's remote copy to the store's trash)
    action: str
    reasons: tuple[str, ...]
    size_bytes: int
