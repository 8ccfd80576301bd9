"""Retention's acts: a plan (`usecases.retention_plan`) carried out, each doomed checkpoint
moved to the trash (or demoted: split, then trashed) on the rail (`usecases.rail`: the run's
lease, a re-check of every file against the catalog right before acting, anything changed
since it was indexed skipped, containment in a configured root, a claim and its audit event).
`dry_run` is the same code path with the acting switched off. Pins too (`set_pinned`); restore
and purge are `usecases.trash`'s.

Pins against a running prune or purge: `ckpt pin` takes no lease (it never waits); instead
every move is *claimed* right before it happens, in one catalog transaction that re-reads the
row's pin and status and sets it `trashed` (with where its files go) only if it is still an
unpinned `ok` checkpoint (`Acts.claim`); a purge claims `trashed` -> `purged` the same
way right before its unlink. Writers are serialized by the database (BEGIN IMMEDIATE; SELECT
... FOR UPDATE elsewhere), so a pin either commits first, and the claim sees it and skips the
checkpoint, or commits after, and then reports the checkpoint as trashed (it can be restored,
and a pinned trashed checkpoint is never purged). A claim whose move fails gives the row its
status back; a claim whose process died before the move is settled by `usecases.recovery` (the
files are where they are: in the trash means trashed, at their path means `ok` again).
Restore and purge hold the run's lease, so they never act on the same files at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..catalog.store import Acting, Acts, Reads, RemoteCopies, StageJobs
from ..catalog.store_leases import HeldLease
from ..core import retention
from ..core.errors import CkptError, LeaseLost, NotFound
from ..core.model import Checkpoint, CheckpointStatus
from ..core.progress import Counter, OnProgress
from ..core.remote import Location, location, verified_copy
from ..fs import fsops
from ..settings.config import Config
from . import guards, rail, save_checks
from .retention_plan import PruneReport, RunPlan, plan_runs, planner_item, run_checkpoints
from .settlement import settle_events
from .trash import parse_older_than, purge, restore

__all__ = [  # restore, purge and the plan live beside; their callers know them by this module
    "PruneReport",
    "RunPlan",
    "parse_older_than",
    "plan_runs",
    "prune",
    "purge",
    "restore",
    "set_pinned",
    "trash_decided",
]


def prune(
    config: Config,
    store: Acting,
    *,
    runs: list[str] | None = None,
    override: retention.Policy | None = None,
    dry_run: bool = False,
    actor: str,
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: OnProgress | None = None,
) -> PruneReport:
    """`should_stop` is asked before each move: a stopped prune leaves the rest as it was.
    `on_progress` hears each planned move start and finish (`trashed` or `failed`), counted in
    checkpoints and bytes over the whole plan."""
    if not dry_run:  # a killed command's claims first: what it never moved is a candidate again
        settle_events(config, store.recovery)
    report = plan_runs(config, store.reads, store.remote, store.stage_jobs, runs, override)
    report.dry_run = dry_run
    if dry_run:
        return report
    batch = rail.batch_name()
    doomed = [d for rp in report.runs for d in rp.plan.to_trash()]
    counter = Counter(on_progress, len(doomed), sum(d.size_bytes for d in doomed))
    for rp in report.runs:
        if rp.plan.to_trash() or rp.remote_doomed():
            rp.moved, rp.remote_moved = set(), set()
            if should_stop():
                break
            try:
                _execute(
                    config,
                    store,
                    rp,
                    batch,
                    actor,
                    report,
                    should_stop,
                    counter,
                    override,
                )
            except fsops.Refused as exc:  # a whole run refused: say so, go on with the others
                report.failures.append({"id": None, "path": rp.run, "error": str(exc)})
    return report


def _execute(
    config: Config,
    store: Acting,
    rp: RunPlan,
    batch: str,
    actor: str,
    report: PruneReport,
    should_stop: Callable[[], bool],
    counter: Counter,
    override: retention.Policy | None,
) -> None:
    # The lease is renewed while the run is pruned (a demotion's split may take long); a lease
    # lost meanwhile (this process stopped past its expiry, another took the run) stops it.
    with rail.run_lease(config, store, rp.run_id, actor) as lease:
        fsops.remove_stale_temps(Path(rp.root) / rp.run, recursive=False)  # of killed commands
        current = {c.id: c for c in run_checkpoints(store.reads, rp.root, rp.run)}
        vanished = [d for d in rp.plan.to_trash() if d.id not in current]
        if vanished:
            # Rows gone since the plan: either this process was stopped past its lease and
            # the one that took the run moved them (then that is said, exit 4, even if
            # nothing would be left to move), or another prune of the run held the lease
            # before this one took it: then the plan is made again on the rows as they are
            # now, under the lease, rather than carried out on a past state.
            lost = _lost_lease(lease)
            if lost is not None:
                _report_lost(report, rp, vanished[0], lost, counter)
                return
            was = rp.plan.to_trash()
            rp.plan = _planned_again(
                config, store.reads, store.remote, store.stage_jobs, rp, override
            )
            now = rp.plan.to_trash()
            size = sum(d.size_bytes for d in now) - sum(d.size_bytes for d in was)
            counter.resize(len(now) - len(was), size)
        _refuse_unsafe_plan(rp, current)
        for decision in rp.plan.to_trash():
            if should_stop():
                return
            counter.start(decision.path)
            try:
                if lease.lost is not None:  # the renewer found the run another process's
                    lease.check()
                trash_decided(config, store, current[decision.id], decision, batch, actor, lease)
                assert rp.moved is not None
                rp.moved.add(decision.id)
                counter.finish(decision.path, "trashed", decision.size_bytes)
            except (CkptError, OSError, KeyError) as exc:
                # A file gone or changed may be the work of the process that took the run's
                # lease while this one was stopped: then that is what is said, once, not
                # `No such file` per file.
                lost = exc if isinstance(exc, LeaseLost) else _lost_lease(lease)
                if lost is not None:
                    _report_lost(report, rp, decision, lost, counter)
                    return
                report.failures.append(
                    {"id": decision.id, "path": decision.path, "error": guards.one_line(exc)}
                )
                counter.finish(decision.path, "failed", detail=guards.one_line(exc))
        _give_up_remote(config, store, rp, batch, actor, report, should_stop, lease)


def _give_up_remote(
    config: Config,
    store: Acting,
    rp: RunPlan,
    batch: str,
    actor: str,
    report: PruneReport,
    should_stop: Callable[[], bool],
    lease: HeldLease,
) -> None:
    """The remote copies the rules give up, each to the store's trash by the remote trash's own
    act (`usecases.tier.rail_remote.trash_remote_copy`: its protection re-checked under the
    lease)."""
    if not rp.remote_doomed():
        return
    from .tier.rail_remote import trash_remote_copy  # boto3 stays unimported until a remote act

    for decision in rp.remote_doomed():
        if should_stop() or _lost_lease(lease) is not None:
            return
        try:
            c = store.reads.get(str(decision.id))
            copies = store.remote.remote_copies([c.id])
            copy = verified_copy(copies)
            if copy is None or location(c.status, copies) != Location.REMOTE:
                raise fsops.Refused(f"{c.path}: not a tiered checkpoint now: its copy is kept")
            reason = "; ".join(decision.reasons)
            trash_remote_copy(
                config, store, c, copy, reason=reason, batch=batch, actor=actor, lease=lease
            )
            assert rp.remote_moved is not None
            rp.remote_moved.add(decision.id)
        except CkptError as exc:
            report.failures.append(
                {"id": decision.id, "path": decision.path, "error": guards.one_line(exc)}
            )


def _planned_again(
    config: Config,
    reads: Reads,
    remote_copies: RemoteCopies,
    stage_jobs: StageJobs,
    rp: RunPlan,
    override: retention.Policy | None,
) -> retention.Plan:
    """The plan of run `rp` made again from the catalog as it is now (no decision: nothing
    left of it to weigh)."""
    try:
        again = plan_runs(config, reads, remote_copies, stage_jobs, [rp.run], override).runs
    except NotFound:  # every row of the run gone meanwhile
        again = []
    same = [p for p in again if (p.run_id, p.root) == (rp.run_id, rp.root)]
    return same[0].plan if same else retention.Plan(decisions=(), bytes_freed=0)


def _lost_lease(lease: HeldLease) -> LeaseLost | None:
    try:
        lease.check()
    except LeaseLost as exc:
        return exc
    return None


def _report_lost(
    report: PruneReport,
    rp: RunPlan,
    decision: retention.Decision,
    exc: LeaseLost,
    counter: Counter,
) -> None:
    """The run is another process's now: nothing more of it is moved (exit 4)."""
    left = [d for d in rp.plan.to_trash() if rp.moved is None or d.id not in rp.moved]
    why = str(exc).replace(f"stopped: run {rp.run_id} ", f"stopped: run {rp.run} ", 1)
    message = f"{why}; {len(left)} planned move(s) of it left to that process"
    report.failures.append(
        {"id": decision.id, "path": decision.path, "error": message, "lease_lost": True}
    )
    report.lease_lost.append({"run": rp.run, "root": rp.root, "error": message})
    counter.finish(decision.path, "failed", detail=message)


def _refuse_unsafe_plan(rp: RunPlan, current: dict[int, Checkpoint]) -> None:
    """The executor's own rails, whatever the planner said."""
    doomed = {d.id for d in rp.plan.to_trash()}
    ok = [c for c in current.values() if c.status == CheckpointStatus.OK]
    if ok and doomed >= {c.id for c in ok}:
        raise fsops.Refused(f"refused: the plan for run {rp.run} would trash every checkpoint")
    # The planner's own notion of newest (epoch/step, then mtime), not when a file was touched.
    if doomed & set(retention.newest([planner_item(c, False) for c in ok])):
        raise fsops.Refused(f"refused: the plan for run {rp.run} would trash its newest checkpoint")


def trash_decided(
    config: Config,
    store: Acting,
    c: Checkpoint,
    decision: retention.Decision,
    batch: str,
    actor: str,
    lease: HeldLease,
) -> None:
    """Carry out one decision to trash, demote or tier `c` under its run's `lease` (retention's
    and the disk guard's): refused if it is pinned or not `ok` any more; a demotion splits first
    (its inference artifact stays in its place), then the file goes to the trash; a tier act
    is `usecases.tier.tiering`'s (the local copy trashed only once the remote one verified). An
    abandoned folder save may go to the trash too, never while a process has a file of it open."""
    # A standby copy of ours holds what its file holds: the disk guard may free it, whole.
    spare_copy = c.status == CheckpointStatus.STANDBY and c.version_of is not None
    if c.status not in (CheckpointStatus.OK, CheckpointStatus.ABANDONED) and not spare_copy:
        raise fsops.Refused(f"{c.path} is {c.status.value} now")
    if c.pinned:
        raise fsops.Refused(f"{c.path} is pinned now")
    if spare_copy and decision.action != "trash":
        raise fsops.Refused(f"{c.path} is a standby copy: only trashed, never {decision.action}")
    if c.status == CheckpointStatus.ABANDONED:
        if decision.action != "trash":
            raise fsops.Refused(f"{c.path} is abandoned: only trashed, never {decision.action}")
        save_checks.refuse_if_written(Path(c.path))
    if decision.action == "tier":  # up, verified, recorded; only then the local copy trashed
        from .tier.tiering import tier_one

        tier_one(config, store, c, reason="; ".join(decision.reasons), actor=actor, lease=lease)
        return
    demote = decision.action == "demote"
    if demote and c.id not in store.acts.ids_with_artifact("inference"):
        from .artifacts import split_checkpoint  # the inference artifact first, then the file

        split_checkpoint(config, store, str(c.id), actor=actor, leased=lease)
    reason = "; ".join(decision.reasons)
    rail.trash_checkpoint(
        config,
        store,
        c,
        reason=reason,
        batch=batch,
        actor=actor,
        lease=lease,
        with_artifacts=not demote,
    )


def set_pinned(reads: Reads, acts: Acts, ref: str, pinned: bool, actor: str) -> Checkpoint:
    c = reads.get(ref)
    acts.set_pinned(c.id, pinned, actor)
    return reads.get(str(c.id))
