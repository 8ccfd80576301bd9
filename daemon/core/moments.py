"""A run's training moments: the points of its training (an epoch, or a step) and the checkpoint
files saved at each, ordered by how far along they are. Pure.

One `fit()` often saves several files at one epoch end (`model-008.keras`, `w-08.weights.h5`,
`best.h5`): retention's `keep_last`, `keep_every` and `keep_within` count these moments, not
files (`core.retention`), so they keep every file of a moment or none.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from posixpath import basename
from typing import Protocol

from .versions import is_fixed_name


class Saved(Protocol):
    """What a moment needs of a checkpoint (`retention.Item` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def mtime(self) -> float: ...
    @property
    def epoch(self) -> int | None: ...
    @property
    def step(self) -> int | None: ...


def progress_key(item: Saved) -> tuple[float, float, float, int]:
    """How far along its run a checkpoint is: epoch, step, then mtime and id; an unknown epoch
    or step sorts after every known one (never older than it might be): `core.retention`."""
    epoch = math.inf if item.epoch is None else item.epoch
    step = math.inf if item.step is None else item.step
    return (epoch, step, item.mtime, item.id)


@dataclass(frozen=True)
class Moment:
    """One point of a run's training and every ok checkpoint saved at it (`model-008.keras`,
    `w-08.weights.h5` and `best.h5` all written at the end of epoch 8): `keep_last`,
    `keep_every` and `keep_within` count moments, so they keep all of its files or none."""

    epoch: int | None
    step: int | None
    items: tuple[Saved, ...]

    def reasons(self, tier: int, reason: str) -> Iterator[tuple[int, int, str]]:
        if len(self.items) > 1:  # say why a file is kept beside others of its moment
            where = f"epoch {self.epoch}" if self.epoch is not None else f"step {self.step}"
            reason = f"{reason} ({where}: {len(self.items)} files)"
        return ((item.id, tier, reason) for item in self.items)


def training_moments(ok: Sequence[Saved]) -> list[Moment]:
    """The run's training moments, furthest along first (by the `progress_key` of their
    furthest file). A file is at moment (epoch, step); within an epoch a file without a step
    is at the epoch's last known step (an epoch-end save beside one that records the step);
    a file with neither epoch nor step is a moment of its own (its progress is unknown)."""
    last_step: dict[int, int] = {}
    for item in ok:
        if item.epoch is not None and item.step is not None:
            last_step[item.epoch] = max(item.step, last_step.get(item.epoch, item.step))
    groups: dict[tuple[object, ...], list[Saved]] = {}
    for item in ok:
        if item.epoch is not None:
            step = last_step.get(item.epoch) if item.step is None else item.step
            key: tuple[object, ...] = ("epoch", item.epoch, step)
        elif item.step is not None:
            key = ("step", item.step)
        else:
            key = ("unknown", item.id)
        groups.setdefault(key, []).append(item)
    moments = [
        Moment(
            items[0].epoch,
            None if items[0].epoch is None and items[0].step is None else _step_of(items),
            tuple(sorted(items, key=progress_key, reverse=True)),
        )
        for items in groups.values()
    ]
    return sorted(moments, key=lambda m: progress_key(m.items[0]), reverse=True)


def _step_of(items: list[Saved]) -> int | None:
    return max((item.step for item in items if item.step is not None), default=None)


def rewritten_in_place(name: str, generation: int) -> bool:
    """Whether the file a checkpoint is at gets rewritten by its trainer (Lightning's
    `last.ckpt`, a loop's `best.pt`: a name without a number, `core.versions.is_fixed_name`;
    or any file seen rewritten): an answer naming it may be other bytes a moment later."""
    return generation > 1 or is_fixed_name(name)


def preferred_over(
    stable: str, rewritten: str, epoch: int | None, step: int | None
) -> dict[str, str]:
    """What `best`, `latest` and `wait` say (`--json`: `preferred_over`) when they answer the
    stable file of a moment rather than the rewritten one that holds the same."""
    at = ", ".join(
        f"{what} {value}" for what, value in (("epoch", epoch), ("step", step)) if value is not None
    )
    return {
        "path": rewritten,
        "why": f"{basename(rewritten)} is rewritten by its trainer; {basename(stable)} holds the "
        f"same moment ({at}) and stays",
    }
