"""The space reserve: our own copies never take the space a trainer needs. Pure.

The reserve of a filesystem is the larger of `versions.reserve` (a size or a percentage of the
filesystem; default 5%) and the biggest checkpoint its trainers wrote, as catalogued (a
trainer's next save may need that much again: a new numbered file, or a rewrite while our copy
of another file fills the space its truncation just freed).

- Every copy we write (a kept version of a rewritten file, a split's artifact, a compressed
  rewrite, a fetch, a restored version) needs free space of at least its size plus the
  reserve, or plus `min_free` where that is set and larger (`room_to_keep`); short of it, for a
  capture, versions in the trash (which retention already let go) are
  purged to make room, and if that is not enough the capture is skipped, with the reason
  (`capture_refusal`).
- Below the reserve, with no configuration at all (where `min_free` is at least the reserve,
  the disk guard is in charge), the service gives up its own bytes, in this order, until free
  space is back above it (`plan`): (1) versions in the trash, oldest trashed first, purged;
  (2) kept versions older than their file's previous generation (never one of the
  `versions.keep_previous` newest, nor a standby copy, nor a pinned one), oldest first and the
  best version of each file last, trashed and purged; (3) the rest of the trash (the user's
  checkpoints retention or `ckpt prune` trashed), oldest trashed first, purged. Never a user's
  checkpoint at its path: deleting those stays the disk guard's, opt-in (`min_free`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .disk_guard import MinFree
from .units import format_size

DEFAULT_RESERVE = MinFree(percent=5.0)
STEPS = ("version_trash", "old_version", "trash")
_LABELS = {
    "version_trash": ("version in the trash purged", "versions in the trash purged"),
    "old_version": ("old version trashed and purged", "old versions trashed and purged"),
    "trash": ("trashed checkpoint purged early", "trashed checkpoints purged early"),
}


def reserve_bytes(reserve: MinFree, total_bytes: int, largest_checkpoint: int) -> int:
    """The reserve in bytes on a filesystem of `total_bytes` whose biggest catalogued
    checkpoint is `largest_checkpoint` bytes."""
    return max(reserve.threshold(total_bytes), largest_checkpoint)


def capture_refusal(free: int, size: int, reserve: int, keep: str = "") -> str | None:
    """Why a copy of `size` bytes must not be made with `free` bytes free, or None if it fits
    with `reserve` bytes left over; `keep` names what those bytes are (default: the reserve)."""
    if free >= size + reserve:
        return None
    keep = keep or f"reserve {format_size(reserve)} (what a trainer's next save may need)"
    return f"free {format_size(free)} < the copy {format_size(size)} + {keep}"


def room_to_keep(reserve: int, min_free: int | None, min_free_as: str = "") -> tuple[int, str]:
    """What every copy of ours must leave free on a filesystem, and what to call it: its
    `min_free` (the disk guard's threshold) when set and larger than the reserve, else the
    reserve. A copy that ate into min_free would only be freed again by the guard, or make it
    take a user's checkpoint."""
    if min_free is not None and min_free >= reserve:
        shown = f" ({min_free_as})" if min_free_as else ""
        return min_free, f"min_free {format_size(min_free)}{shown}"
    return reserve, ""


@dataclass(frozen=True)
class Ours:
    """A file of ours the reserve may give up: a trashed row (`trashed_at` set) or a kept
    version at its path."""

    id: int
    path: str
    bytes: int
    order: str  # oldest first: trashed_at (ISO, sorts as time) or the version's mtime
    version: bool = False
    best: bool = False  # the best version of its file (goes last among the old versions)


@dataclass(frozen=True)
class Step:
    which: str  # one of STEPS
    action: str  # "purge" (a trashed row) | "trash" (a version: trashed, then purged)
    id: int
    path: str
    frees: int
    reason: str


@dataclass(frozen=True)
class ReservePlan:
    free: int
    reserve: int
    steps: tuple[Step, ...] = ()
    free_after: int = 0
    enough: bool = True

    def explain(self) -> str:
        head = f"free {format_size(self.free)} < reserve {format_size(self.reserve)}"
        counts = {what: 0 for what in STEPS}
        for step in self.steps:
            counts[step.which] += 1
        done = ", ".join(f"{n} {_LABELS[what][n != 1]}" for what, n in counts.items() if n)
        line = f"{head}: {done or 'nothing of ours to free'}"
        freed = sum(step.frees for step in self.steps)
        line += f" ({format_size(freed)})"
        if not self.enough:
            line += "; the rest is the trainers' (deleting checkpoints needs min_free)"
        return line


def plan(
    free: int,
    reserve: int,
    trashed: Sequence[Ours],
    old_versions: Sequence[Ours],
    *,
    only: Sequence[str] = STEPS,
    goal: str = "reserve",
) -> ReservePlan:
    """The acts that bring `free` back to `reserve` (or to `goal`, named so in the reasons), in
    the documented order, with the steps in `only`. `trashed`: every unpinned trashed row of
    the filesystem (versions and others); `old_versions`: the kept versions the caller found
    unprotected (not a previous generation, not pinned, not standby)."""
    steps: list[Step] = []
    now = free
    version_trash = sorted((t for t in trashed if t.version), key=lambda t: (t.order, t.id))
    other_trash = sorted((t for t in trashed if not t.version), key=lambda t: (t.order, t.id))
    olds = sorted(old_versions, key=lambda v: (v.best, v.order, v.id))
    for which, action, items, what in (
        ("version_trash", "purge", version_trash, "a version in the trash, purged"),
        ("old_version", "trash", olds, "an old version (not the previous): trashed and purged"),
        ("trash", "purge", other_trash, "purged from the trash early (oldest trashed first)"),
    ):
        if which not in only:
            continue
        for item in items:
            if now >= reserve:
                break
            if item.bytes <= 0:
                continue
            reason = (
                f"low free space (free {format_size(now)} < {goal} {format_size(reserve)}): "
                f"{what}{' (the best version of its file)' if item.best else ''}"
            )
            steps.append(Step(which, action, item.id, item.path, item.bytes, reason))
            now += item.bytes
    return ReservePlan(free, reserve, tuple(steps), now, now >= reserve)
