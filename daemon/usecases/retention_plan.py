"""What retention would do, decided before anything acts: each run's plan (`core.retention`
with the run's policy, or the versions' own for a run without one), and the facts the planner
and the disk guard read from the catalog: a run's checkpoints, the previous generations kept
versions protect, a checkpoint as a planner item (demotable or not).

`ckpt prune --dry-run` is this module alone; `usecases.pruner` carries a plan out on the rail.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..catalog.store import Reads, RemoteCopies, StageJobs
from ..core import retention
from ..core.errors import NotFound, UsageError
from ..core.model import Checkpoint, CheckpointStatus, Format
from ..core.query import ListQuery
from ..core.remote import RemoteState, location
from ..core.remote_keep import why_kept
from ..core.resume import may_resume_listed
from ..core.retention_rows import NO_REMOTE
from ..core.runs import run_scope
from ..core.versions import Kept, previous_generations, trainer_file
from ..settings.config import Config
from .artifacts import split_by_policy
from .pipeline import awaiting_stages
from .tier.locations import uses_remote
from .trainer_housekeeping import trainer_best
from .vanished import GONE

REMOTE_TRASH = "trash-remote"


@dataclass
class RunPlan:
    root: str
    run: str
    run_id: int
    policy: str  # where it came from, and what it says
    plan: retention.Plan
    moved: set[int] | None = None  # ids actually moved to the trash (None: nothing was run)
    remote_moved: set[int] | None = None  # ids whose remote copy went to the store's trash

    def remote_doomed(self) -> list[retention.Decision]:
        """The tiered checkpoints whose remote copy the rules give up (`trash-remote`)."""
        return [d for d in self.plan.decisions if d.action == REMOTE_TRASH]

    @property
    def bytes_freed(self) -> int:
        """What the plan frees (dry run), or what the moves that happened freed."""
        if self.moved is None:
            return self.plan.bytes_freed
        return sum(d.size_bytes for d in self.plan.to_trash() if d.id in self.moved)

    def done(self, d: retention.Decision) -> bool:
        moved = self.remote_moved if d.action == REMOTE_TRASH else self.moved
        return d.id in (moved or ())

    @property
    def trashed(self) -> int:
        doomed = self.plan.to_trash()
        return len(doomed) if self.moved is None else len(self.moved)


@dataclass
class PruneReport:
    dry_run: bool
    runs: list[RunPlan] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    lease_lost: list[dict[str, str]] = field(default_factory=list)  # runs another process took

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "runs": [
                {
                    "run": rp.run,
                    "root": rp.root,
                    "policy": rp.policy,
                    "decisions": [
                        {
                            "id": d.id,
                            "path": d.path,
                            "action": d.action,
                            "reasons": list(d.reasons),
                            "bytes": d.size_bytes,
                            **({"done": rp.done(d)} if rp.moved is not None else {}),
                        }
                        for d in rp.plan.decisions
                    ],
                    "bytes_freed": rp.bytes_freed,
                    "trashed": rp.trashed,
                    "tiered": sum(
                        1
                        for d in rp.plan.decisions
                        if d.action == "tier" and (rp.moved is None or d.id in rp.moved)
                    ),
                    "remote_trashed": len(rp.remote_doomed())
                    if rp.remote_moved is None
                    else len(rp.remote_moved),
                    "notes": list(rp.plan.notes),
                }
                for rp in self.runs
            ],
            "skipped": self.skipped,
            "failures": self.failures,
            "lease_lost": self.lease_lost,
        }


def plan_runs(
    config: Config,
    reads: Reads,
    remote_copies: RemoteCopies,
    stage_jobs: StageJobs,
    runs: list[str] | None = None,
    override: retention.Policy | None = None,
    now: float | None = None,
    listed: Mapping[tuple[str, str], Sequence[Checkpoint]] | None = None,
) -> PruneReport:
    """`runs`: these runs and the runs below each (`exp` covers `exp/checkpoints`, as `ckpt best
    --run exp` does), each planned on its own, with its own policy; none: every run. `now`:
    what `tier_after` counts back from (default: the clock). `listed`: rows already read, by
    (root, run): a superset of each such run's own rows (a run's history), not listed again."""
    report = PruneReport(dry_run=True)
    now = time.time() if now is None else now
    scopes = [run_scope(r) for r in runs or ()]
    for run_id, root, name in reads.run_keys():
        if scopes and not any(scope.covers(name) for scope in scopes):
            continue
        policy, source = (override, "command line") if override else config.policy_for(root, name)
        known = listed.get((root, name)) if listed else None
        rows = reads.list(ListQuery(run=name, root=root)) if known is None else known
        found = own_rows(rows, name)
        previous = {**trainer_best(reads, found), **protected_generations(config, found)}
        remote = remote_places(config, remote_copies, rows, name)
        found += [c for c in rows if remote.get(c.id) == "remote"]
        # Our kept copies are never training moments: the run's policy weighs the trainer's
        # checkpoints, and the copies have a policy of their own, so their cost stays bounded.
        copies = [c for c in found if c.version_of is not None]
        found = [c for c in found if c.version_of is None] if policy is not None else []
        if policy is None and not copies:
            report.skipped.append({"run": name, "reason": "no retention policy configured"})
            continue
        if policy is not None:  # a checkpoint whose keep_best stage has not run stays
            previous = {**awaiting_stages(config, stage_jobs, found, policy), **previous}
        items = [
            planner_item(c, demotable(c), previous.get(c.id), tier_blocked(config, c))
            if c.id not in remote
            else remote_item(c, remote[c.id], rows, remote, previous.get(c.id), config)
            for c in found
        ]
        plans = [retention.plan(items, policy, now)] if items and policy is not None else []
        kept_copies = versions_policy(config, copies)
        if copies:
            items = [planner_item(c, False, previous.get(c.id)) for c in copies]
            plans.append(_of_copies(retention.plan(items, kept_copies)))
        if plans:
            described = (
                f"{source}: {policy.describe()}; versions: {kept_copies.describe()}"
                if policy is not None and copies
                else f"{source}: {policy.describe()}"
                if policy is not None
                else f"versions: {kept_copies.describe()}"
            )
            report.runs.append(RunPlan(root, name, run_id, described, _merged(plans, rows)))
    if runs and not report.runs and not report.skipped:
        raise NotFound(f"no run named {', '.join(runs)} in the catalog")
    if report.skipped and not report.runs and not config.has_retention():
        raise UsageError(
            "no retention policy: pass keep flags (ckpt prune --help) or configure "
            "`retention:` in the config"
        )
    return report


def _of_copies(plan: retention.Plan) -> retention.Plan:
    """The versions' plan, its rules' reasons said to be theirs ("kept copies: best val_loss
    #1"), never to be read as the run's own best or last."""

    def said(reason: str) -> str:
        return reason if reason.startswith("previous generation") else f"kept copies: {reason}"

    decisions = tuple(
        replace(d, reasons=tuple(said(r) for r in d.reasons)) if d.action == "keep" else d
        for d in plan.decisions
    )
    return replace(plan, decisions=decisions)


def _merged(plans: Sequence[retention.Plan], rows: Sequence[Checkpoint]) -> retention.Plan:
    """The plans of a run's checkpoints and of its kept copies as one, in the order the files
    were written (as each plan is)."""
    if len(plans) == 1:
        return plans[0]
    age = {c.id: (c.mtime, c.id) for c in rows}
    decisions = sorted((d for p in plans for d in p.decisions), key=lambda d: age[d.id])
    return retention.Plan(
        decisions=tuple(decisions),
        bytes_freed=sum(p.bytes_freed for p in plans),
        notes=tuple(n for p in plans for n in p.notes),
    )


def run_checkpoints(reads: Reads, root: str, run: str) -> list[Checkpoint]:
    """The checkpoints of run `run` itself (a listing's `run` covers the runs below it too)."""
    return own_rows(reads.list(ListQuery(run=run, root=root)), run)


def own_rows(found: Sequence[Checkpoint], run: str) -> list[Checkpoint]:
    """Of `found` (rows of one root), those of run `run` itself that the planner weighs (the
    plan orders them by age: the listing's order does not matter)."""
    return [c for c in found if c.run == run and c.status not in GONE]


def remote_places(
    config: Config, remote_copies: RemoteCopies, rows: Sequence[Checkpoint], run: str
) -> dict[int, str]:
    """id -> `remote` (its bytes only in a verified remote copy: tiered) or `both`, for the
    rows of run `run` that have a verified remote copy; empty without a `remote:`."""
    if not uses_remote(config):
        return {}
    mine = [c for c in rows if c.run == run and c.version_of is None]
    verified = {
        x.checkpoint_id
        for x in remote_copies.remote_copies(c.id for c in mine)
        if x.state == RemoteState.VERIFIED
    }
    places = {c.id: location(c.status, []).value for c in mine if c.id in verified}
    return {i: "remote" if where == "none" else "both" for i, where in places.items()}


def remote_item(
    c: Checkpoint,
    where: str,
    rows: Sequence[Checkpoint],
    places: Mapping[int, str],
    protected: str | None,
    config: Config,
) -> retention.Item:
    """`c` with a verified remote copy as the planner sees it. A remote-only one is weighed as
    ok (its bytes are whole, in the store), protected as the remote trash's act would protect
    it (`core.remote_keep`: the act re-checks it under the lease), and never tiered again."""
    if where == "both":
        item = planner_item(c, demotable(c), protected, tier_blocked(config, c))
        return replace(item, where="both")
    alive = {r.id for r in rows if r.status == CheckpointStatus.OK} | set(places)
    kept = why_kept(c, [r for r in rows if r.run == c.run], alive)
    if protected is None and kept is not None:
        protected = f"remote copy kept: {kept}"
    item = planner_item(c, False, protected, "in the object store already")
    return replace(item, status=CheckpointStatus.OK.value, where="remote")


def protected_generations(config: Config, found: list[Checkpoint]) -> dict[int, str]:
    """id -> why: the kept versions among `found` that are a previous generation of their file
    (`versions.keep_previous`), which retention never trashes."""
    kept = [
        Kept(c.id, c.version_of, c.generation)
        for c in found
        if c.version_of is not None and c.status == CheckpointStatus.OK
    ]
    return previous_generations(kept, config.versions.keep_previous)


def versions_policy(config: Config, kept: list[Checkpoint]) -> retention.Policy:
    """For a run without a retention policy, its versions: the best by `versions.metric`
    (default val_loss, else loss, whichever they have), beside the previous generations."""
    metric = config.versions.metric or next(
        (m for m in ("val_loss", "loss") if any(m in c.metrics for c in kept)), "val_loss"
    )
    return retention.Policy(keep_best=(retention.KeepBest(metric, 1, keep_missing=False),))


def planner_item(
    c: Checkpoint,
    can_demote: bool,
    protected: str | None = None,
    blocked: str | None = NO_REMOTE,
) -> retention.Item:
    """`c` as the planner sees it; `can_demote`: it may become its inference artifact.
    `protected`: why retention never trashes it (a previous generation of a kept version).
    `blocked`: why it cannot be tiered to the object store (None: it can)."""
    return retention.Item(
        id=c.id,
        path=c.path,
        status=c.status.value,
        mtime=c.mtime,
        size_bytes=c.size_bytes,
        epoch=c.epoch,
        step=c.step,
        pinned=c.pinned,
        metrics=c.metrics,
        inference_bytes=_inference_bytes(c) if can_demote else None,
        protected=protected,
        tier_blocked=blocked,
        trash_reason=f"abandoned: {c.reason or 'no reason recorded'}"
        if c.status == CheckpointStatus.ABANDONED
        else None,
        resumable=c.version_of is None and may_resume_listed(c),
        trainer_file=None if c.version_of is not None else trainer_file(Path(c.path).name),
        copy=c.version_of is not None,
    )


def tier_blocked(config: Config, c: Checkpoint) -> str | None:
    """Why `c` cannot go to its root's object store now (None: it can; `usecases.tier.tiering`)."""
    if config.remote is None and not any(r.remote for r in config.roots):
        return NO_REMOTE  # no object store at all: no path to resolve (1,000 per run page)
    root = config.root_for(Path(c.path))
    if root is None or config.remote_for(root) is None:
        return NO_REMOTE
    from .tier.tiering import why_not  # boto3 stays unimported until a tier act

    return why_not(config, c)


def _inference_bytes(c: Checkpoint) -> int:
    """The size of `c`'s inference artifact, about: without its optimizer state a checkpoint
    is its weights plus the config; a DeepSpeed tag's is the consolidated fp32 model (its
    ZeRO-3 model states are placeholders: their size says nothing of the model's)."""
    if c.format == Format.DEEPSPEED_ZERO and c.weights_bytes:
        return c.weights_bytes
    return c.size_bytes - (c.optimizer_bytes or 0)


def demotable(c: Checkpoint) -> bool:
    """Split into an inference artifact would free its optimizer state."""
    return split_by_policy(c)
