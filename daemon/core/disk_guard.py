"""The disk-pressure guard's decision: what to free, in which order, and why. Pure.

When a filesystem's free space falls below its `min_free`, `plan()` lists the acts that bring it
back above, in this documented order, each with its reason, stopping as soon as enough is freed.
Our own bytes go first, whole, before any checkpoint of the user's is touched:

1. our leftovers: temp files and partial copies of ours whose writer is gone (`ours`, kind
   "temp"), removed;
2. kept copies (`.ckpt-versions/`): versions in the trash purged, then the kept versions at their
   path trashed and purged, oldest first: first those nothing asks to keep, then the previous
   generations `versions.keep_previous` keeps (a copy is never the only way back to what a
   trainer resumes from: that is at its path). Never demoted or tiered: a copy goes whole. Never
   a pinned one, nor one that holds the run's best by a kept metric when no file at its path
   is as good (the keras#17012 case versions exist for);
3. our artifacts (`ours`, kind "artifact": a split's inference file or folder) whose checkpoint
   is still `ok` at its path (the artifact is then a second copy of its weights), removed;
4. the rest of the trash, oldest trashed first, purged (a trash on the same filesystem frees
   nothing until it is purged; a pinned checkpoint in the trash is never purged);
5. tier: with object storage (`remote:`, reachable), the oldest checkpoints that no rule
   protects and that can be tiered (`Item.tier_blocked` None) go to the store (uploaded,
   verified, recorded), then their local copy is trashed and purged: their bytes stay whole,
   so this comes before anything that trashes a checkpoint without a remote copy;
6. demote: split a full checkpoint into its inference artifact, then the full file goes to the
   trash and is purged (a usable model stays); only while the artifact itself fits in what is
   free at that moment;
7. the oldest checkpoints that no rule protects and that were not tiered: to the trash, then
   purged; first those that no retention rule keeps (the next retention pass would trash them
   anyway), then those kept only by a rule such as keep_last or keep_every (the reason names
   the rule overridden).

Within steps 5 to 7 the oldest go first, by mtime across runs (the runs on one filesystem have
no common epoch), then id; those with a pipeline stage still pending or running on them
(`RunFacts.pending`) go after the others of their step, and a step that takes one names the
stages it gives up (`Step.gives_up`: the caller cancels those jobs, saying so).

Never in any plan (`protections`): a run's newest checkpoint (by progress, and the last
written) and every file of its newest training moment (kept copies never count), pinned ones,
every one that is not `ok` (incomplete, corrupt, unreadable: still being written, or not
understood), the best of each keep_best metric of the run's policy and of its monitored metric
(val_loss by default), a run's last resumable one, and those the caller protects with a
reason of its own (`Item.protected`; for a kept copy that reason only orders it within step 2).
When the plan cannot free enough it says so, with what is holding the space: the biggest
protected checkpoints and their reasons, and the bytes of the filesystem that the catalog does
not know (other files).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import retention
from .model import CheckpointStatus
from .moments import training_moments
from .query import default_mode
from .retention_rows import best_first
from .units import format_size
from .versions import is_version_path

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
    # id -> the pipeline stages pending or running on it (lost if its bytes go)
    pending: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class TrashEntry:
    id: int
    path: str
    bytes: int
    trashed_at: str  # ISO 8601 UTC: sorts as time
    pinned: bool = False


@dataclass(frozen=True)
class OwnFile:
    """A file of ours that is no checkpoint: a leftover temp (`kind` "temp", `id` 0) or a
    split's artifact whose checkpoint is `ok` at its path (`kind` "artifact", `id` that
    checkpoint's)."""

    kind: str
    id: int
    path: str
    bytes: int


# "remove" (a leftover temp or an artifact of ours) | "purge" (a trashed one) | "demote" |
# "tier" | "trash" (then purged)
ACTIONS = ("remove", "purge", "demote", "tier", "trash")


@dataclass(frozen=True)
class Step:
    action: str  # one of ACTIONS
    id: int
    path: str
    run: str | None
    frees: int
    reason: str
    gives_up: tuple[str, ...] = ()  # the pipeline stages pending or running on it


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
        given_up = [step for step in self.steps if step.gives_up]
        if given_up:
            line += f"; gives up the pending stages of {len(given_up)} checkpoint(s)"
        if not self.enough:
            line += f"; cannot free enough: {'; '.join(self.holding)}"
        return line


def protections(run: RunFacts) -> dict[int, str]:
    """{id: reason} of the run's checkpoints that the guard never touches (module doc)."""
    found: dict[int, list[str]] = {}

    def add(item_id: int, reason: str) -> None:
        found.setdefault(item_id, []).append(reason)

    ok = [item for item in run.items if item.status == CheckpointStatus.OK]
    files = [item for item in ok if not is_copy(item)]
    for item_id, reason in retention.newest(files).items():  # a copy is no training moment
        add(item_id, reason)
    moments = training_moments(files)
    if moments:  # every file of it: `ckpt_epoch007.pt` beside `last.pt` and `best.pt` of epoch 7
        for saved in moments[0].items:
            if saved.id not in found:
                add(saved.id, "newest training moment")
    for item in run.items:
        if item.pinned:
            add(item.id, "pinned")
        if item.status != CheckpointStatus.OK and not _spare(item):
            add(item.id, f"{item.status}: never touched")
        if item.protected and not is_copy(item):  # a copy's only orders it among ours
            add(item.id, item.protected)
    copies = [item for item in ok if is_copy(item)]
    for metric, mode in run.best_metrics:
        best = _best(files, metric, mode)
        if best is not None:
            add(best.id, f"best {metric}")
        # A kept copy better than every file at its path holds the only copy of the best.
        best_copy = _best(copies, metric, mode)
        if best_copy is not None and (best is None or _better(best_copy, best, metric, mode)):
            add(best_copy.id, f"best {metric} (only this kept copy holds it)")
    if run.last_resumable is not None:
        add(run.last_resumable, "last resumable")
    return {item_id: ", ".join(reasons) for item_id, reasons in found.items()}


def is_copy(item: retention.Item) -> bool:
    """A kept version (`.ckpt-versions/`): a copy of ours, not a file a trainer wrote there."""
    return is_version_path(item.path)


def _spare(item: retention.Item) -> bool:
    """A standby kept copy: a copy of ours holding what its file holds now."""
    return is_copy(item) and item.status == CheckpointStatus.STANDBY


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
    ours: Sequence[OwnFile] = (),
) -> GuardPlan:
    """The acts that bring `free` back to at least `threshold`, in the documented order.
    `other_bytes`: what the filesystem holds that the catalog does not know (for "cannot free");
    `ours`: our leftover temps and the artifacts of checkpoints still at their path."""
    protected: dict[int, str] = {}
    for run in runs:
        protected.update(protections(run))
    pending = {item_id: stages for run in runs for item_id, stages in run.pending.items()}
    plan = _Planner(free, threshold)
    for own in sorted((o for o in ours if o.kind == "temp"), key=lambda o: o.path):
        plan.add("remove", own.id, own.path, None, own.bytes, "a leftover temp file of ours")
    # Our kept copies, whole: those in the trash, then those nothing keeps, then the previous
    # generations (oldest first in each).
    copies_trashed = [t for t in trash if is_version_path(t.path)]
    for entry in sorted(copies_trashed, key=lambda t: (t.trashed_at, t.id)):
        if not entry.pinned:
            plan.add("purge", entry.id, entry.path, None, entry.bytes, _COPY_TRASHED)
    copies = sorted(
        (
            (item, run.name)
            for run in runs
            for item in run.items
            if is_copy(item)
            and item.id not in protected
            and (item.status == CheckpointStatus.OK or _spare(item))
        ),
        # Standby copies last: each is what its file holds now, the way back after a worse
        # rewrite (keras#17012), and the newest a trainer's next save would otherwise lose.
        key=lambda pair: (_spare(pair[0]), pair[0].protected is not None, pair[0].mtime),
    )
    for item, run_name in copies:
        kept = "standby: what its file holds now" if _spare(item) else item.protected
        why = f"{_COPY}{f' ({kept})' if kept else ''}: trashed and purged"
        plan.add("trash", item.id, item.path, run_name, item.size_bytes, why)
    for own in sorted((o for o in ours if o.kind == "artifact"), key=lambda o: o.path):
        plan.add("remove", own.id, own.path, None, own.bytes, _ARTIFACT)
    for entry in sorted(trash, key=lambda t: (t.trashed_at, t.id)):
        if not entry.pinned and not is_version_path(entry.path):
            plan.add("purge", entry.id, entry.path, None, entry.bytes, _TRASHED)
    movable = sorted(
        (
            (item, run.name)
            for run in runs
            for item in run.items
            if item.id not in protected and item.status == CheckpointStatus.OK and not is_copy(item)
        ),
        # The oldest first; those a stage still waits to run on after the others.
        key=lambda pair: (pair[0].id in pending, pair[0].mtime, pair[0].id),
    )
    # Tiering first: a checkpoint's bytes stay whole, in the store; demoting or trashing one
    # that has no remote copy loses them (the demoted one its optimizer state).
    demoted: set[int] = set()  # tiered or demoted: not trashed after
    for item, run_name in movable:
        if item.tier_blocked is None:
            why = "tiered to the object store (verified), local copy purged"
            lost = pending.get(item.id, ())
            if plan.add("tier", item.id, item.path, run_name, item.size_bytes, why, lost):
                demoted.add(item.id)
    for item, run_name in movable:
        artifact = item.inference_bytes
        saves = item.size_bytes - (artifact or 0)
        if item.id in demoted or artifact is None or saves <= 0 or artifact >= plan.now:
            continue  # tiered, not splittable, nothing to gain, or its artifact would not fit
        reason = "demoted to its inference artifact (split), the full file trashed and purged"
        lost = pending.get(item.id, ())
        if plan.add("demote", item.id, item.path, run_name, saves, reason, lost):
            demoted.add(item.id)
    kept_by = {item_id: rules for run in runs for item_id, rules in run.kept_by.items()}
    # Those no retention rule keeps go first (the next retention pass would trash them anyway).
    for item, run_name in sorted(movable, key=lambda pair: pair[0].id in kept_by):
        if item.id in demoted:
            continue
        rules = kept_by.get(item.id)
        which = f"kept only by {rules}" if rules else "no retention rule keeps it"
        reason = f"oldest checkpoint no protection covers ({which}): trashed and purged"
        lost = pending.get(item.id, ())
        plan.add("trash", item.id, item.path, run_name, item.size_bytes, reason, lost)
    enough = plan.now >= threshold
    holding = () if enough else _holding(runs, protected, trash, other_bytes)
    return GuardPlan(free, threshold, tuple(plan.steps), plan.now, enough, holding, protected)


_COPY = "a kept copy of ours (.ckpt-versions): our copies go first, whole"
_COPY_TRASHED = "a kept copy of ours in the trash, purged (our copies go first)"
_ARTIFACT = (
    "an artifact of ours whose checkpoint is whole at its path (a second copy of its weights)"
)
_TRASHED = "purged from the trash (oldest trashed first)"


class _Planner:
    """The steps so far and the free space they would reach."""

    def __init__(self, free: int, threshold: int) -> None:
        self.now, self.threshold = free, threshold
        self.steps: list[Step] = []

    def add(
        self,
        action: str,
        id_: int,
        path: str,
        run: str | None,
        frees: int,
        what: str,
        gives_up: tuple[str, ...] = (),
    ) -> bool:
        """Plan this act if still short of the threshold and it frees something."""
        if self.now >= self.threshold or frees <= 0:
            return False
        if gives_up:
            what += f"; gives up its pending stage{'s' * (len(gives_up) > 1)} {', '.join(gives_up)}"
        why = _why(self.now, self.threshold, what)
        self.steps.append(Step(action, id_, path, run, frees, why, gives_up))
        self.now += frees
        return True


def _why(free: int, threshold: int, what: str) -> str:
    return f"disk pressure (free {format_size(free)} < min_free {format_size(threshold)}): {what}"


def _best(ok: Sequence[retention.Item], metric: str, mode: str) -> retention.Item | None:
    valued = [item for item in ok if item.value(metric) is not None]
    # retention's keep_best order, so that both protect the same one of tied checkpoints
    return min(valued, key=best_first(metric, mode), default=None)


def _better(a: retention.Item, b: retention.Item, metric: str, mode: str) -> bool:
    """`a` strictly better than `b` by `metric`."""
    va, vb = a.value(metric), b.value(metric)
    assert va is not None and vb is not None
    return va < vb if mode == "min" else va > vb


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
    counts = dict.fromkeys(ACTIONS, 0)
    for step in steps:
        counts[step.action] += 1
    return counts
