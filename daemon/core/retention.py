"""Retention planning: which checkpoints of one run to keep, which to trash, and why. Pure.

`plan(items, policy)` decides; it never touches files, the catalog or the clock (the executor in
`pruner` acts on the plan, and re-checks each file before it does). One `Decision` per candidate,
each with every reason that kept it, or the reasons it goes.

Semantics:

- Candidates are the run's rows with status ok, incomplete, corrupt or unreadable; missing,
  trashed and purged rows are not in the plan. Rules look at complete (ok) checkpoints only: a
  file still being written neither takes a keep_last slot nor counts as the best. A tiered
  checkpoint (`Item.where == "remote"`: its bytes only in a verified remote copy) is weighed as
  an ok one; what the rules drop of it is its remote copy (`trash-remote`, `core.tier_plan`).
- Order ("newest", "oldest", keep_last, the budget's order) is what a checkpoint *is*, never
  when a file was last touched: `progress_key` = (epoch, step, mtime, id), where an unknown
  epoch or step counts as +infinity. So within a run, epoch 12 is newer than epoch 3 whatever
  their mtimes (a rewrite, a copy, a `touch`); among equal epochs the step decides, then the
  mtime the trainer gave the file, then the id. A checkpoint whose progress is unknown (no
  epoch, or no step beside others with one) is placed after every one that has it: it never
  looks older than it might be (conservative: at worst it takes a keep_last slot).
- Always kept: the newest ok checkpoint by that order ("newest"), and also the most recently
  written one if that is another ("newest mtime": a run mixing known and unknown progress
  keeps both candidates), pinned ones ("pinned"), every non-ok one but an abandoned save
  (its status as the reason: the planner never trashes what it could not read), and those the
  caller protects with a reason of its own (`Item.protected`: a rewritten file's previous
  generation). An abandoned save takes no rule's slot; it goes with `Item.trash_reason`.
- `keep_last`, `keep_every` and `keep_within` count training moments, not files
  (`training_moments`): every ok file saved at one epoch (or step) is one moment, so
  `model-008.keras`, `w-08.weights.h5` and `best.h5` of epoch 8 are kept, or not, together, and
  the reason says how many files the moment holds ("last #1 (epoch 8: 3 files)").
- Keep rules are a union: a checkpoint survives if any rule keeps it. `keep_last N`; `keep_best`
  per metric (ties: the trainer's own file, then newer mtime, then higher id; a checkpoint
  without the metric, or with NaN, is kept with "no <metric>: kept" unless
  `keep_missing=False`); `keep_every N` on the epoch, or on
  the step when there is no epoch; `keep_within D`; `keep_hourly/daily/weekly N`: for each of the
  last N UTC hours/days/ISO weeks that hold ok checkpoints, the newest one of that period. Unlike
  borg, periodic rules do not skip periods already kept by another rule, and there is no
  "[oldest]" fallback: each rule is judged alone, so adding a rule can only keep more.
- There is no reference-time argument: `keep_within` is measured from the newest mtime among
  the run's ok checkpoints (inclusive: exactly 2d older is within 2d), never from now, so a
  finished run, or a daemon back after two weeks, keeps its window; periodic rules count
  periods that hold checkpoints, not calendar periods back from today.
- Budget (`max_bytes`, per run): while the kept ok checkpoints total more, trash, in this order,
  (1) those kept only by keep_within / keep_every / periodic rules, oldest (`progress_key`)
  first, (2) those kept by keep_last or keep_best beyond #1 (or "no <metric>: kept"), oldest
  first.
  Never the protected ones (newest, pinned, non-ok, best #1 of each metric); if they alone are
  over budget the plan keeps them and says so in `Plan.notes`.
- Demotion comes first: over budget, checkpoints that can be split (`Item.inference_bytes` set:
  a full Keras, torch, Lightning or HF Trainer checkpoint with optimizer state) are `demote`d
  in the same order as above, i.e. replaced by their inference artifact (about a third of the
  size with Adam), before anything is trashed; only if that is not enough does it trash.
- The remote tier (`tier_after`, `keep_local`, and the budget's step between demoting and
  trashing) is `core.tier_plan`'s: the ladder is full -> inference artifact -> remote -> trash.
- A policy without any keep rule is refused: `max_bytes` alone would trash all but the newest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from .best_twins import seconds_of_the_best
from .errors import UsageError
from .model import CheckpointStatus
from .moments import Moment, progress_key, training_moments
from .newest import newest, placed_by_save_time
from .query import default_mode
from .retention_rows import Decision, Item, best_first
from .tier_plan import KeepLocal, budget_tierable, placed, stays_local
from .units import format_duration, format_size

NOT_CANDIDATES = frozenset(
    {
        CheckpointStatus.MISSING,
        CheckpointStatus.REMOVED,
        CheckpointStatus.TRASHED,
        CheckpointStatus.PURGED,
    }
)
COUNT_RULES = ("keep_last", "keep_every", "keep_hourly", "keep_daily", "keep_weekly")
# How much a reason protects under budget pressure: the budget trashes LOOSE before RANKED and
# never touches PROTECTED.
PROTECTED, RANKED, LOOSE = 0, 1, 2


@dataclass(frozen=True)
class KeepBest:
    metric: str
    n: int
    mode: str | None = None  # None: default_mode(metric)
    keep_missing: bool = True

    @property
    def resolved_mode(self) -> str:
        return self.mode or default_mode(self.metric)


@dataclass(frozen=True)
class Policy:
    keep_last: int | None = None
    keep_best: tuple[KeepBest, ...] = ()
    keep_every: int | None = None
    keep_within: float | None = None  # seconds
    keep_hourly: int | None = None
    keep_daily: int | None = None
    keep_weekly: int | None = None
    max_bytes: int | None = None
    tier_after: float | None = None  # seconds: kept ones older than this go to the object store
    keep_local: KeepLocal | None = None  # what stays local when the rest tiers

    def is_empty(self) -> bool:
        """True when no rule keeps anything (`max_bytes` only trims what the others keep)."""
        counts = [getattr(self, name) for name in COUNT_RULES]
        return not self.keep_best and self.keep_within is None and all(n is None for n in counts)

    def describe(self) -> str:
        parts = [] if self.keep_last is None else [f"keep_last {self.keep_last}"]
        for rule in self.keep_best:
            missing = "" if rule.keep_missing else " (missing not kept)"
            parts.append(f"keep_best {rule.metric} {rule.resolved_mode} {rule.n}{missing}")
        if self.keep_every is not None:
            parts.append(f"keep_every {self.keep_every}")
        if self.keep_within is not None:
            parts.append(f"keep_within {format_duration(self.keep_within)}")
        for name in COUNT_RULES[2:]:
            if getattr(self, name) is not None:
                parts.append(f"{name} {getattr(self, name)}")
        if self.max_bytes is not None:
            parts.append(f"max_bytes {format_size(self.max_bytes)}")
        if self.tier_after is not None:
            parts.append(f"tier_after {format_duration(self.tier_after)}")
        if self.keep_local is not None:
            parts.append(self.keep_local.describe())
        return ", ".join(parts) or "no rule"


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]  # by (mtime, id): the order the files were written
    bytes_freed: int
    notes: tuple[str, ...] = ()

    def to_trash(self) -> list[Decision]:
        """Every decision that removes the full checkpoint from the local disk (trash, demote
        then trash, tier then trash)."""
        return [d for d in self.decisions if d.action in FREEING]


FREEING = ("trash", "demote", "tier")


def plan(items: Sequence[Item], policy: Policy, now: float | None = None) -> Plan:
    """One decision per candidate checkpoint of one run, oldest first. See the module doc.
    `now`: the time `tier_after` counts back from (None: no checkpoint tiers by age)."""
    _validate(policy)
    candidates = sorted(placed_by_save_time(_candidates(items)), key=_age)
    ok = [item for item in candidates if item.status == CheckpointStatus.OK]
    tags: dict[int, list[tuple[int, str]]] = {item.id: [] for item in candidates}
    for item_id, tier, reason in _reasons(candidates, ok, policy):
        tags[item_id].append((tier, reason))
    over: dict[int, tuple[str, str]] = {}
    notes: tuple[str, ...] = ()
    rules = [(rule.metric, rule.resolved_mode) for rule in policy.keep_best]
    local = stays_local(candidates, ok, newest(ok), policy.keep_local, rules)
    if policy.max_bytes is not None:  # the local disk's budget: remote-only ones cost nothing
        kept = [item for item in ok if tags[item.id] and item.where != "remote"]
        over, notes = _trim(kept, tags, policy.max_bytes, local)
    by_id = {item.id: item for item in candidates}
    twins = seconds_of_the_best(ok, tags, [rule.metric for rule in policy.keep_best])
    candidates = [replace(i, trash_reason=i.trash_reason or twins.get(i.id)) for i in candidates]
    decisions = tuple(
        Decision(d.id, d.path, *placed(d, by_id[d.id], local, policy.tier_after, now), d.size_bytes)
        for d in (_decide(item, tags[item.id], over.get(item.id)) for item in candidates)
    )
    freed = sum(d.size_bytes for d in decisions if d.action in FREEING)
    return Plan(decisions=decisions, bytes_freed=freed, notes=notes)


def _validate(policy: Policy) -> None:
    if policy.is_empty():
        raise UsageError(
            "retention policy is empty: give at least one keep rule (keep_last, keep_best, "
            "keep_every, keep_within, keep_hourly, keep_daily, keep_weekly)"
        )
    for name in COUNT_RULES:
        _check_count(name, getattr(policy, name))
    seen: set[str] = set()
    for rule in policy.keep_best:
        _check_count(f"keep_best {rule.metric}", rule.n)
        if rule.resolved_mode not in ("min", "max"):
            raise UsageError(f"retention: keep_best {rule.metric}: mode must be min or max")
        if rule.metric in seen:
            raise UsageError(f"retention: keep_best {rule.metric}: metric given twice")
        seen.add(rule.metric)
    if policy.keep_within is not None and not policy.keep_within > 0:
        raise UsageError("retention: keep_within must be a duration above 0s")
    if policy.max_bytes is not None and not policy.max_bytes > 0:
        raise UsageError("retention: max_bytes must be above 0")
    if policy.keep_local and policy.keep_local.best and not policy.keep_best:
        raise UsageError("retention: keep_local.best needs a keep_best rule (which metric)")


def _check_count(name: str, n: int | None) -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise UsageError(f"retention: {name} must be a whole number of at least 1, got {n!r}")


def _candidates(items: Sequence[Item]) -> list[Item]:
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError("retention: duplicate checkpoint ids in one run")
    return [item for item in items if CheckpointStatus(item.status) not in NOT_CANDIDATES]


def _age(item: Item) -> tuple[float, int]:
    return (item.mtime, item.id)


def _reasons(
    candidates: list[Item], ok: list[Item], policy: Policy
) -> Iterator[tuple[int, int, str]]:
    """(id, tier, reason) in a fixed order: protections, then rules as the policy lists them."""
    protected = newest(ok)
    for item in candidates:
        if item.id in protected:
            yield item.id, PROTECTED, protected[item.id]
        if item.pinned:
            yield item.id, PROTECTED, "pinned"
        if item.protected:
            yield item.id, PROTECTED, item.protected
        if item.status not in (CheckpointStatus.OK, CheckpointStatus.ABANDONED):
            yield item.id, PROTECTED, str(item.status)
    newest_first = ok[::-1]  # by mtime: ties in keep_best, periods
    moments = training_moments([item for item in ok if not item.copy])  # copies: no moment
    if policy.keep_last is not None:
        for rank, moment in enumerate(moments[: policy.keep_last], start=1):
            yield from moment.reasons(RANKED, f"last #{rank}")
    for rule in policy.keep_best:
        yield from _keep_best(newest_first, rule)
    if policy.keep_every is not None:
        yield from _keep_every(moments, policy.keep_every)
    if policy.keep_within is not None and ok:
        since = ok[-1].mtime - policy.keep_within  # inclusive: exactly 2d old is within 2d
        reason = f"within {format_duration(policy.keep_within)} of newest"
        for moment in moments:
            if any(item.mtime >= since for item in moment.items):
                yield from moment.reasons(LOOSE, reason)
    for kind in ("hourly", "daily", "weekly"):
        n = getattr(policy, f"keep_{kind}")
        if n is not None:
            yield from _keep_periodic(newest_first, kind, n)


def _keep_best(newest_first: list[Item], rule: KeepBest) -> Iterator[tuple[int, int, str]]:
    valued: list[Item] = []
    for item in newest_first:
        if item.value(rule.metric) is not None:
            valued.append(item)
        elif rule.keep_missing:  # conservative: no evidence it is worse, so keep it
            yield item.id, RANKED, f"no {rule.metric}: kept"
    # The best is never left in a file its trainer rewrites alone (`best_first`).
    valued.sort(key=best_first(rule.metric, rule.resolved_mode))
    for rank, item in enumerate(valued[: rule.n], start=1):
        tier = PROTECTED if rank == 1 else RANKED
        yield item.id, tier, f"best {rule.metric} #{rank} ({item.value(rule.metric):.4g})"


def _keep_every(moments: list[Moment], n: int) -> Iterator[tuple[int, int, str]]:
    for moment in moments:
        if moment.epoch is not None:
            if moment.epoch % n == 0:
                yield from moment.reasons(LOOSE, "every epoch" if n == 1 else f"every {n} epochs")
        elif moment.step is not None and moment.step % n == 0:
            yield from moment.reasons(LOOSE, "every step" if n == 1 else f"every {n} steps")


def _period(kind: str, mtime: float) -> str:
    moment = datetime.fromtimestamp(mtime, UTC)
    if kind == "hourly":
        return moment.strftime("%Y-%m-%d %H:00")
    if kind == "daily":
        return moment.strftime("%Y-%m-%d")
    year, week, _ = moment.isocalendar()
    return f"{year}-W{week:02d}"


def _keep_periodic(newest_first: list[Item], kind: str, n: int) -> Iterator[tuple[int, int, str]]:
    # Periods are monotonic in time, so a newest-first walk meets each period once, newest first.
    last, rank = None, 0
    for item in newest_first:
        period = _period(kind, item.mtime)
        if period == last:
            continue
        last, rank = period, rank + 1
        if rank > n:
            return
        yield item.id, LOOSE, f"{kind} #{rank} ({period})"


def _trim(
    kept: list[Item],
    tags: dict[int, list[tuple[int, str]]],
    max_bytes: int,
    local: dict[int, str],
) -> tuple[dict[int, tuple[str, str]], tuple[str, ...]]:
    """(action, reason) by id for what the budget demotes, tiers or trashes, and a note if that
    is not enough. Demotion first (it keeps a usable model), then the remote tier (it keeps the
    whole checkpoint, in the store), then trashing, each in budget order."""
    total = sum(item.size_bytes for item in kept)
    strength = {item.id: min(tier for tier, _ in tags[item.id]) for item in kept}
    order = sorted(
        (item for item in kept if strength[item.id] != PROTECTED),
        key=lambda item: (strength[item.id] == RANKED, progress_key(item)),
    )
    over: dict[int, tuple[str, str]] = {}

    def over_budget(then: str = "") -> str:  # the bytes as they are before this act
        return f"over budget: {format_size(total)} > {format_size(max_bytes)}{then}"

    for item in order:
        saved = item.size_bytes - (item.inference_bytes or 0)
        if total <= max_bytes:
            break
        if item.inference_bytes is not None and saved > 0:
            over[item.id] = ("demote", over_budget(": demoted to its inference artifact"))
            total -= saved
    for item in order:
        if total <= max_bytes:
            break
        if item.id not in over and budget_tierable(item, local):
            over[item.id] = ("tier", over_budget(": tiered to the object store"))
            total -= item.size_bytes
    for item in order:
        if total <= max_bytes:
            break
        if over.get(item.id, ("",))[0] == "tier":
            continue  # its local bytes go with the tier
        left = item.inference_bytes if item.id in over else item.size_bytes
        if not left or left <= 0:
            continue  # trashing it frees nothing
        over[item.id] = ("trash", over_budget())
        total -= left
    if total <= max_bytes:
        return over, ()
    note = (
        f"still over budget: {format_size(total)} > {format_size(max_bytes)}; what is left is "
        "protected (newest, pinned, not ok, or best #1 of a metric)"
    )
    return over, (note,)


def _decide(
    item: Item, tags: list[tuple[int, str]], over_budget: tuple[str, str] | None
) -> Decision:
    if over_budget is not None:
        action, reason = over_budget
        freed = item.size_bytes - (item.inference_bytes or 0 if action == "demote" else 0)
        return Decision(item.id, item.path, action, (reason,), freed)
    if not tags:
        why = item.trash_reason or "matched no keep rule"
        return Decision(item.id, item.path, "trash", (why,), item.size_bytes)
    reasons = tuple(reason for _, reason in tags)
    return Decision(item.id, item.path, "keep", reasons, item.size_bytes)
