"""The remote tier in retention's plan: which kept checkpoints move to the object store, and
why. Pure: the clock is an argument (`now`), as `artifacts.split_after`'s is.

The demotion ladder is full -> inference artifact -> remote -> trash:

- `tier_after D`: a checkpoint the rules keep, `ok`, written more than D before `now`, is
  tiered (uploaded, verified, recorded, then its local copy trashed: `usecases.tier.tiering`). Its
  keep reasons stay in the decision: it is still kept, in the store.
- Over budget (`max_bytes`, the run's local bytes), `core.retention` tiers after demoting and
  before trashing, in the budget's order.
- Never tiered, whatever the rules (`stays_local`): the run's newest checkpoint (by progress,
  and the last written), pinned ones, every one that is not `ok`, those the caller protects
  (`Item.protected`: a previous generation of a rewritten file), and what `keep_local` keeps:
  the last N training moments (`last`) and the best N of each keep_best metric (`best`).
  One that cannot be tiered (`Item.tier_blocked`: no `remote:` for its root, a kept version,
  no hash yet) stays where it is; when it was due, the reason says why.
- Remote retention: a tiered checkpoint (`where == "remote"`: its bytes only in a verified
  remote copy) is weighed by the rules like a local one, so `keep_last 10` keeps ten in all,
  local or remote. One they keep stays in the store; one they drop has its remote copy moved
  to the store's trash (`trash-remote`: undoable until `trash.purge_after`, never the copy of
  a pinned checkpoint or of its run's newest, best or last resumable one:
  `core.remote_keep`, re-checked under the lease). A checkpoint with both copies that the
  rules drop loses its local copy first; from then on it is a remote-only one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .moments import training_moments
from .retention_rows import Decision, Item, best_first
from .units import format_duration


@dataclass(frozen=True)
class KeepLocal:
    """`keep_local: {last: N, best: N}`: what stays on the local disk when the rest tiers."""

    last: int | None = None
    best: int | None = None

    def describe(self) -> str:
        parts = [f"{name} {n}" for name, n in (("last", self.last), ("best", self.best)) if n]
        return "keep_local " + (" ".join(parts) if parts else "none")


def placed(
    decision: Decision,
    item: Item,
    local: Mapping[int, str],
    tier_after: float | None,
    now: float | None,
) -> tuple[str, tuple[str, ...]]:
    """(action, reasons) of a decision once where its bytes are is weighed: a remote-only
    checkpoint kept stays in the store, one dropped has its remote copy trashed; a local one
    kept and ok tiers once written `tier_after` before `now` (when both are set), unless it
    stays local (`local`: {id: why}) or cannot be tiered."""
    if item.where == "remote":
        if decision.action == "keep":
            return "keep", (*decision.reasons, "in the object store")
        return "trash-remote", (*decision.reasons, "its remote copy to the store's trash")
    if tier_after is None or now is None or decision.action != "keep":
        return decision.action, decision.reasons
    if item.status != "ok" or item.mtime > now - tier_after:  # newer than tier_after: not due
        return decision.action, decision.reasons
    if item.id in local:
        return "keep", (*decision.reasons, f"stays local ({local[item.id]})")
    if item.tier_blocked is not None:
        return "keep", (*decision.reasons, f"not tiered: {item.tier_blocked}")
    why = f"older than tier_after {format_duration(tier_after)}: tiered to the object store"
    return "tier", (why, *decision.reasons)


def stays_local(
    candidates: Sequence[Item],
    ok: Sequence[Item],
    newest: Mapping[int, str],
    keep_local: KeepLocal | None,
    best_rules: Sequence[tuple[str, str]],
) -> dict[int, str]:
    """{id: why} of the checkpoints never tiered (module doc). `ok` oldest first (by mtime);
    `newest`: the run's newest ones (`retention.newest`); `best_rules`: (metric, mode) of the
    policy's keep_best rules."""
    ok = [i for i in ok if i.where != "remote"]  # what stays local is among the local ones
    found: dict[int, list[str]] = {}
    _merge(found, list(newest.items()))
    _merge(found, [(i.id, "pinned") for i in candidates if i.pinned])
    _merge(found, [(i.id, str(i.status)) for i in candidates if i.status != "ok"])
    _merge(found, [(i.id, i.protected) for i in candidates if i.protected])
    keep = keep_local or KeepLocal()
    if keep.last:
        for rank, moment in enumerate(training_moments(ok)[: keep.last], start=1):
            _merge(found, [(i.id, f"keep_local last #{rank}") for i in moment.items])
    for metric, mode in best_rules if keep.best else ():
        valued = [i for i in ok if i.value(metric) is not None]
        for rank, i in enumerate(sorted(valued, key=best_first(metric, mode))[: keep.best], 1):
            _merge(found, [(i.id, f"keep_local best {metric} #{rank}")])
    return {item_id: ", ".join(reasons) for item_id, reasons in found.items()}


def _merge(found: dict[int, list[str]], pairs: Sequence[tuple[int, str]]) -> None:
    for item_id, reason in pairs:
        found.setdefault(item_id, []).append(reason)


def budget_tierable(item: Item, local: Mapping[int, str]) -> bool:
    """The budget may tier it (after demotion, before trashing)."""
    return item.tier_blocked is None and item.id not in local
