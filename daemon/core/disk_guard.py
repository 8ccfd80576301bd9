"""The disk-pressure guard's decision: what to free, in which order, and why. Pure.

When a filesystem's free space falls below its `min_free`, `plan()` lists the acts that bring it
back above, in this documented order, each with its reason, stopping as soon as enough is freed:

1. purge the trash, oldest trashed first (a trash on the same filesystem frees nothing until it
   is purged; a pinned checkpoint in the trash is never purged);
2. tier: with object storage (`remote:`, reachable), the oldest checkpoints that no rule
   protects and that can be tiered (`Item.tier_blocked` None) go to the store (uploaded,
   verified, recorded), then their local copy is trashed and purged: their bytes stay whole,
   so this comes before anything that trashes a checkpoint without a remote copy;
3. demote: split a full checkpoint into its inference artifact, then the full file goes to the
   trash and is purged (a usable model stays); only while the artifact itself fits in what is
   free at that moment;
4. the oldest checkpoints that no rule protects and that were not tiered: to the trash, then
   purged; first those that no retention rule keeps (the next retention pass would trash them
   anyway), then those kept only by a rule such as keep_last or keep_every (the reason names
   the rule overridden).

Within steps 2 to 4 the oldest go first, by mtime across runs (the runs on one filesystem have
no common epoch), then id. Never in any plan (`protections`): a run's newest checkpoint (by
progress, and the last written), pinned ones, every one that is not `ok` (incomplete, corrupt,
unreadable: still being written, or not understood), the best of each keep_best metric of the
run's policy and of its monitored metric (val_loss by default), a run's last resumable one, and
those the caller protects with a reason of its own (`Item.protected`: a version kept as the
previous generation of a rewritten file, the best version). When the plan cannot free enough it
says so, with what is holding the space: the biggest protected checkpoints and their reasons,
and the bytes of the filesystem that the catalog does not know (other files).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import retention
from .model import CheckpointStatus
from .query import default_mode
from .units import format_size

HOLDING_SHOWN = 5  # how many of the biggest protected checkpoints "cannot free" names


@dataclass(frozen=True)
class MinFree:
    """`min_free` as configured: bytes (`20GB`) or a percentage of the filesystem (`10%`)."""

    bytes: int | None = None
    percent: float | None = None

    def threshold(self, total_bytes: int) -> int:
        """The threshold in bytes on a filesystem of `total_bytes`."""
        if self.percent is not None:
            return math.ceil(total_bytes * self.percent / 100)
        return int(self.bytes or 0)

    def describe(self) -> str:
        if self.percent is not None:
            return f"{self.percent:g}%"
        return format_size(self.bytes)


@dataclass(frozen=True)
class RunFacts:
    """One run's candidates as the guard sees them."""

    name: str
    items: tuple[retention.Item, ...]
    best_metrics: tuple[tuple[str, str], ...] = ()  # (metric, "min"|"max") whose best is kept
    last_resumable: int | None = None  # the id of the run's last resumable checkpoint
    # id -> the retention rules that keep it (the run's policy; absent: no rule keeps it).
    kept_by: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrashEntry:
    id: int
    path: str
    bytes: int
    trashed_at: str  # ISO 8601 UTC: sorts as time
    pinned: bool = False


@dataclass(frozen=True)
class Step:
    action: str  # "purge" (a trashed one) | "demote" | "tier" | "trash" (then purged)
    id: int
    path: str
    run: str | None
    frees: int
    reason: str


@dataclass(frozen=True)
class GuardPlan:
    free: int
    threshold: int
    steps: tuple[Step, ...] = ()
    free_after: int = 0  # expected, if every step frees what it should
    enough: bool = True
    holding: tuple[str, ...] = ()  # when not enough: what keeps the space, biggest first
    protected: Mapping[int, str] = field(default_factory=dict)  # id -> why never touched

    @property
    def bytes_freed(self) -> int:
        return sum(step.frees for step in self.steps)

    def explain(self) -> str:
        """One line: what the plan does, or that it cannot free enough and why."""
        head = f"free {format_size(self.free)} < min_free {format_size(self.threshold)}"
        done = (
            ", ".join(f"{n} {action}" for action, n in _counts(self.steps).items() if n)
            or "nothing to free"
        )
        line = f"{head}: {done} ({format_size(self.bytes_freed)})"
        if not self.enough:
            line += f"; cannot free enough: {'; '.join(self.holding)}"
        return line


def protections(run: RunFacts) -> dict[int, str]:
    """{id: reason} of the run's checkpoints that the guard never touches (module doc)."""
    found: dict[int, list[str]] = {}

    def add(item_id: int, reason: str) -> None:
        found.setdefault(item_id, []).append(reason)

    ok = [item for item in run.items if item.status == CheckpointStatus.OK]
    for item_id, reason in retention.newest(ok).items():
        add(item_id, reason)
    for item in run.items:
        if item.pinned:
            add(item.id, "pinned")
        if item.status != CheckpointStatus.OK:
            add(item.id, f"{item.status}: never touched")
        if item.protected:
            add(item.id, item.protected)
    for metric, mode in run.best_metrics:
        best = _best(ok, metric, mode)
        if best is not None:
            add(best.id, f"best {metric}")
    if run.last_resumable is not None:
        add(run.last_resumable, "last resumable")
    return {item_id: ", ".join(reasons) for item_id, reasons in found.items()}


def best_metrics(keep_best: Iterable[retention.KeepBest], logged: Iterable[str]) -> tuple:
    """(metric, mode) of every keep_best rule, and the monitored metric (val_loss by default
    when the run logs it) when no rule names one."""
    rules = [(rule.metric, rule.resolved_mode) for rule in keep_best]
    if not rules and "val_loss" in set(logged):
        rules.append(("val_loss", default_mode("val_loss")))
    return tuple(rules)


def plan(
    free: int,
    threshold: int,
    runs: Sequence[RunFacts],
    trash: Sequence[TrashEntry] = (),
    *,
    other_bytes: int = 0,
) -> GuardPlan:
    """The acts that bring `free` back to at least `threshold`, in the documented order.
    `other_bytes`: what the filesystem holds that the catalog does not know (for "cannot free")."""
    protected: dict[int, str] = {}
    for run in runs:
        protected.update(protections(run))
    steps: list[Step] = []
    now = free
    for entry in sorted(trash, key=lambda t: (t.trashed_at, t.id)):
        if now >= threshold:
            break
        if entry.pinned or entry.bytes <= 0:
            continue
        steps.append(
            Step(
                "purge",
                entry.id,
                entry.path,
                None,
                entry.bytes,
                _why(now, threshold, "purged from the trash (oldest trashed first)"),
            )
        )
        now += entry.bytes
    movable = sorted(
        (
            (item, run.name)
            for run in runs
            for item in run.items
            if item.id not in protected and item.status == CheckpointStatus.OK
        ),
        key=lambda pair: (pair[0].mtime, pair[0].id),
    )
    # Tiering first: a checkpoint's bytes stay whole, in the store; demoting or trashing one
    # that has no remote copy loses them (the demoted one its optimizer state).
    demoted: set[int] = set()  # tiered or demoted: not trashed after
    for item, run_name in movable:
        if now >= threshold:
            break
        if item.size_bytes <= 0 or item.tier_blocked is not None:
            continue
        why = _why(now, threshold, "tiered to the object store (verified), local copy purged")
        steps.append(Step("tier", item.id, item.path, run_name, item.size_bytes, why))
        demoted.add(item.id)
        now += item.size_bytes
    for item, run_name in movable:
        if now >= threshold:
            break
        artifact = item.inference_bytes
        saves = item.size_bytes - (artifact or 0)
        if item.id in demoted or artifact is None or saves <= 0 or artifact >= now:
            continue  # tiered, not splittable, nothing to gain, or its artifact would not fit
        reason = "demoted to its inference artifact (split), the full file trashed and purged"
        steps.append(
            Step("demote", item.id, item.path, run_name, saves, _why(now, threshold, reason))
        )
        demoted.add(item.id)
        now += saves
    kept_by = {item_id: rules for run in runs for item_id, rules in run.kept_by.items()}
    # Those no retention rule keeps go first (the next retention pass would trash them anyway).
    for item, run_name in sorted(movable, key=lambda pair: pair[0].id in kept_by):
        if now >= threshold:
            break
        if item.id in demoted or item.size_bytes <= 0:
            continue
        rules = kept_by.get(item.id)
        which = f"kept only by {rules}" if rules else "no retention rule keeps it"
        reason = f"oldest checkpoint no protection covers ({which}): trashed and purged"
        steps.append(
            Step(
                "trash", item.id, item.path, run_name, item.size_bytes, _why(now, threshold, reason)
            )
        )
        now += item.size_bytes
    enough = now >= threshold
    holding = () if enough else _holding(runs, protected, trash, other_bytes)
    return GuardPlan(free, threshold, tuple(steps), now, enough, holding, protected)


def _why(free: int, threshold: int, what: str) -> str:
    return f"disk pressure (free {format_size(free)} < min_free {format_size(threshold)}): {what}"


def _best(ok: Sequence[retention.Item], metric: str, mode: str) -> retention.Item | None:
    valued = [(value, item) for item in ok if (value := _value(item, metric)) is not None]
    if not valued:
        return None
    sign = 1.0 if mode == "min" else -1.0
    # Ties: the newer one (retention's keep_best order), so both agree on which is the best.
    return min(valued, key=lambda pair: (sign * pair[0], -pair[1].mtime, -pair[1].id))[1]


def _value(item: retention.Item, metric: str) -> float | None:
    value = item.metrics.get(metric)
    return None if value is None or math.isnan(value) else float(value)


def _holding(
    runs: Sequence[RunFacts],
    protected: Mapping[int, str],
    trash: Sequence[TrashEntry],
    other_bytes: int,
) -> tuple[str, ...]:
    kept = sorted(
        (item for run in runs for item in run.items if item.id in protected),
        key=lambda item: (-item.size_bytes, item.id),
    )
    total = sum(item.size_bytes for item in kept)
    which = (
        "1 protected checkpoint holds"
        if len(kept) == 1
        else f"{len(kept)} protected checkpoints hold"
    )
    lines = [f"{which} {format_size(total)}"]
    lines += [
        f"{item.path} ({format_size(item.size_bytes)}: {protected[item.id]})"
        for item in kept[:HOLDING_SHOWN]
    ]
    pinned = sum(t.bytes for t in trash if t.pinned)
    if pinned:
        lines.append(f"pinned checkpoints in the trash hold {format_size(pinned)}")
    lines.append(f"other files on the filesystem, not in the catalog: {format_size(other_bytes)}")
    return tuple(lines)


def _counts(steps: Iterable[Step]) -> dict[str, int]:
    counts = {"purge": 0, "demote": 0, "tier": 0, "trash": 0}
    for step in steps:
        counts[step.action] += 1
    return counts
