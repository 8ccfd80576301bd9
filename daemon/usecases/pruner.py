"""Retention use cases: plan, prune (to the trash), restore, purge.

Decisions come from the pure planner (`core.retention`); this module holds the safety rails:
the run's lease, a re-check of every file against the catalog right before acting (anything
changed since it was indexed is skipped), containment in a configured root (fsops), and an
audit event recorded before each filesystem call and completed after it. `dry_run` is the same
code path with the acting switched off.

Pins against a running prune or purge: `ckpt pin` takes no lease (it never waits); instead
every move is *claimed* right before it happens, in one catalog transaction that re-reads the
row's pin and status and sets it `trashed` (with where its files go) only if it is still an
unpinned `ok` checkpoint (`Store.claim`); a purge claims `trashed` -> `purged` the same
way right before its unlink. Writers are serialized by the database (BEGIN IMMEDIATE; SELECT
... FOR UPDATE elsewhere), so a pin either commits first, and the claim sees it and skips the
checkpoint, or commits after, and then reports the checkpoint as trashed (it can be restored,
and a pinned trashed checkpoint is never purged). A claim whose move fails gives the row its
status back; a claim whose process died before the move is settled by `usecases.recovery` (the
files are where they are: in the trash means trashed, at their path means `ok` again).
Restore and purge hold the run's lease, so they never act on the same files at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.store import Store
from ..catalog.store_leases import HeldLease
from ..core import retention
from ..core.errors import CkptError, LeaseLost, NotFound, UsageError
from ..core.model import Checkpoint, CheckpointStatus, Format, TrashedCheckpoint
from ..core.progress import Counter, OnProgress
from ..core.query import ListQuery
from ..core.runs import run_scope
from ..core.units import iso_utc, parse_duration
from ..core.versions import Kept, previous_generations
from ..formats import tf_state
from ..fs import fsops
from ..settings.config import Config
from . import guards, recovery

_GONE = {
    CheckpointStatus.MISSING,
    CheckpointStatus.REMOVED,
    CheckpointStatus.TRASHED,
    CheckpointStatus.PURGED,
}


@dataclass
class RunPlan:
    root: str
    run: str
    run_id: int
    policy: str  # where it came from, and what it says
    plan: retention.Plan
    moved: set[int] | None = None  # ids actually moved to the trash (None: nothing was run)

    @property
    def bytes_freed(self) -> int:
        """What the plan frees (dry run), or what the moves that happened freed."""
        if self.moved is None:
            return self.plan.bytes_freed
        return sum(d.size_bytes for d in self.plan.to_trash() if d.id in self.moved)

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
                            **({"done": d.id in rp.moved} if rp.moved is not None else {}),
                        }
                        for d in rp.plan.decisions
                    ],
                    "bytes_freed": rp.bytes_freed,
                    "trashed": rp.trashed,
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
    store: Store,
    runs: list[str] | None = None,
    override: retention.Policy | None = None,
) -> PruneReport:
    """`runs`: these runs and the runs below each (`exp` covers `exp/checkpoints`, as `ckpt best
    --run exp` does), each planned on its own, with its own policy; none: every run."""
    report = PruneReport(dry_run=True)
    scopes = [run_scope(r) for r in runs or ()]
    for run_id, root, name in store.run_keys():
        if scopes and not any(scope.covers(name) for scope in scopes):
            continue
        policy, source = (override, "command line") if override else config.policy_for(root, name)
        found = _checkpoints(store, root, name)
        previous = _previous_generations(config, found)
        if policy is None:
            # Kept versions have a policy of their own, so their cost stays bounded.
            found = [c for c in found if c.version_of is not None]
            policy, source = _versions_policy(config, found), "versions"
            if not found:
                report.skipped.append({"run": name, "reason": "no retention policy configured"})
                continue
        items = [_item(c, _demotable(c), previous.get(c.id)) for c in found]
        if items:
            described = f"{source}: {policy.describe()}"
            report.runs.append(
                RunPlan(root, name, run_id, described, retention.plan(items, policy))
            )
    if runs and not report.runs and not report.skipped:
        raise NotFound(f"no run named {', '.join(runs)} in the catalog")
    if report.skipped and not report.runs and not config.has_retention():
        raise UsageError(
            "no retention policy: pass keep flags (ckpt prune --help) or configure "
            "`retention:` in the config"
        )
    return report


def prune(
    config: Config,
    store: Store,
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
        recovery.settle_events(config, store)
    report = plan_runs(config, store, runs, override)
    report.dry_run = dry_run
    if dry_run:
        return report
    batch = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    doomed = [d for rp in report.runs for d in rp.plan.to_trash()]
    counter = Counter(on_progress, len(doomed), sum(d.size_bytes for d in doomed))
    for rp in report.runs:
        if rp.plan.to_trash():
            rp.moved = set()
            if should_stop():
                break
            try:
                _execute(config, store, rp, batch, actor, report, should_stop, counter)
            except fsops.Refused as exc:  # a whole run refused: say so, go on with the others
                report.failures.append({"id": None, "path": rp.run, "error": str(exc)})
    return report


def _execute(
    config: Config,
    store: Store,
    rp: RunPlan,
    batch: str,
    actor: str,
    report: PruneReport,
    should_stop: Callable[[], bool],
    counter: Counter,
) -> None:
    holder = f"{actor} pid {os.getpid()}"
    # The lease is renewed while the run is pruned (a demotion's split may take long); a lease
    # lost meanwhile (this process stopped past its expiry, another took the run) stops it.
    with store.lease(rp.run_id, holder, config.lease_seconds, node=config.node_name) as lease:
        if lease.taken_from is not None:  # a killed command held it: settle what it left planned
            recovery.settle_events(config, store, of=lease.taken_from)
        fsops.remove_stale_temps(Path(rp.root) / rp.run, recursive=False)  # of killed commands
        current = {c.id: c for c in _checkpoints(store, rp.root, rp.run)}
        _refuse_unsafe_plan(rp, current)
        for decision in rp.plan.to_trash():
            if should_stop():
                return
            counter.start(decision.path)
            try:
                if lease.lost is not None:  # the renewer found the run another process's
                    lease.check()
                _trash(config, store, current[decision.id], decision, batch, actor, lease)
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
    if doomed & set(retention.newest([_item(c, False) for c in ok])):
        raise fsops.Refused(f"refused: the plan for run {rp.run} would trash its newest checkpoint")


def _trash(
    config: Config,
    store: Store,
    c: Checkpoint,
    decision: retention.Decision,
    batch: str,
    actor: str,
    lease: HeldLease,
) -> None:
    if c.status != CheckpointStatus.OK or c.pinned:
        raise fsops.Refused(f"{c.path} is {'pinned' if c.pinned else c.status.value} now")
    if decision.action == "demote" and c.id not in store.ids_with_artifact("inference"):
        from .artifacts import split_checkpoint  # the inference artifact first, then the file

        split_checkpoint(config, store, str(c.id), actor=actor, leased=lease)
    root, members = guards.located(config, store, c)
    guards.recheck(store, c, root, members)
    if decision.action != "demote":  # a demoted checkpoint leaves its artifact in its place
        members = [*members, *_artifact_files(store, root, c)]
    reason = "; ".join(decision.reasons)
    trash = {
        "paths": [
            str(root.joinpath(fsops.TRASH_DIR, batch, *fsops.relative_parts(root, m)))
            for m in members
        ],
        "at": iso_utc(time.time()),
        "batch": batch,
        "members": [str(m) for m in members],
    }
    # The claim confirms the run's lease in its transaction: a prune whose lease was taken
    # over (it was stopped past the expiry) moves nothing more.
    event_id, refused = store.claim(
        c.id, action="trash", reason=reason, actor=actor, trash=trash, lease=lease
    )
    if event_id is None:
        raise fsops.Refused(refused)
    try:
        trashed = fsops.move_to_trash(root, members, batch)
    except BaseException as exc:
        store.end_claim(event_id, c.id, failed=guards.one_line(exc))
        raise
    if [str(p) for p in trashed] != trash["paths"]:  # the catalog names where they really went
        moved = {**trash, "paths": [str(p) for p in trashed]}
        store.set_status(c.id, CheckpointStatus.TRASHED, reason, trash=moved)
    store.end_claim(event_id, c.id)
    if c.format == Format.TF_CHECKPOINT:
        _forget_in_state_file(root, Path(c.path))


def _artifact_files(store: Store, root: Path, c: Checkpoint) -> list[Path]:
    """The files derived from `c` that are on disk (inference artifact, its card, a json+h5
    export): they go to the trash with it and come back with it."""
    found = []
    for a in store.get(str(c.id)).details.get("artifacts", []):
        path = Path(a["path"])
        if a["kind"] == "compressed" or path == Path(c.path):  # the checkpoint itself
            continue
        try:
            if fsops.identity(root, path) is not None:
                found.append(path)
        except (fsops.Refused, OSError):  # outside the root or a vanished folder: left alone
            continue
    return found


def _forget_in_state_file(root: Path, prefix: Path) -> None:
    """Keep TF's `checkpoint` file naming checkpoints that exist (latest_checkpoint, resume)."""
    state = prefix.parent / tf_state.STATE_FILE
    try:
        text = state.read_text()
    except FileNotFoundError:
        return
    rewritten = tf_state.without(text, str(prefix.parent), str(prefix))
    if rewritten is not None:
        fsops.atomic_write(root, state, rewritten.encode())


def restore(config: Config, store: Store, ref: str, actor: str) -> Checkpoint:
    c = store.get(recovery.trashed_ref(store, ref))
    info = c.details.get("trash") or {}
    if c.status != CheckpointStatus.TRASHED or not info.get("paths"):
        raise UsageError(f"{c.path} is {c.status.value}, not in the trash")
    root = guards.configured_root(config, c)
    fsops.remove_stale_temps(Path(c.path).parent, recursive=False)  # of killed commands
    holder = f"{actor} pid {os.getpid()}"
    with store.lease(
        guards.run_id(store, c), holder, config.lease_seconds, node=config.node_name
    ) as lease:
        if lease.taken_from is not None:
            recovery.settle_events(config, store, of=lease.taken_from)
        with store.audited(
            action="restore",
            checkpoint_id=c.id,
            path=c.path,
            reason=None,
            size=c.size_bytes,
            actor=actor,
            lease=lease,
        ):
            fsops.restore(
                root, [Path(p) for p in info["paths"]], [Path(p) for p in info["members"]]
            )
            # A record found in the trash was never read: the next scan reads it.
            status = CheckpointStatus.OK if c.hash else CheckpointStatus.INCOMPLETE
            reason = None if c.hash else "restored from the trash: read at the next scan"
            store.set_status(c.id, status, reason, clear_trash=True)
    return store.get(str(c.id))


def purge(
    config: Config,
    store: Store,
    *,
    older_than: float,
    dry_run: bool = False,
    actor: str,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[list[TrashedCheckpoint], list[dict[str, Any]]]:
    """Delete trashed checkpoints trashed more than `older_than` seconds ago (never a pinned
    one). `should_stop` is asked before each item. Returns (purged, failures)."""
    cutoff = iso_utc(time.time() - older_than)
    trashed = store.trashed(include_pinned=False)
    due = [t for t in trashed if t.trashed_at <= cutoff]
    if dry_run:
        return due, []
    purged, failures = [], []
    for item in due:
        if should_stop():
            break
        try:
            _purge_one(config, store, item, actor)
            purged.append(item)
        except (CkptError, OSError) as exc:
            failures.append({"id": item.id, "path": item.path, "error": guards.one_line(exc)})
    return purged, failures


def _purge_one(
    config: Config, store: Store, item: TrashedCheckpoint, actor: str, reason: str | None = None
) -> None:
    """`reason`: why it is purged before its grace period (the disk guard's), for `ckpt log`."""
    root = config.root_for(Path(item.path))
    if root is None or str(root.path) != item.root:
        raise fsops.Refused(f"{item.path} is not inside a configured root: never touched")
    run_id = store.run_of(item.id)
    holder = f"{actor} pid {os.getpid()}"
    with store.lease(run_id, holder, config.lease_seconds, node=config.node_name) as lease:
        if lease.taken_from is not None:
            recovery.settle_events(config, store, of=lease.taken_from)
        # Claimed right before the unlink: a pin committed before it keeps the files.
        event_id, refused = store.claim(
            item.id, action="purge", reason=reason, actor=actor, lease=lease
        )
        if event_id is None:
            raise fsops.Refused(refused)
        try:
            fsops.purge(root.path, [Path(p) for p in item.trash_paths])
        except BaseException as exc:
            store.end_claim(event_id, item.id, failed=guards.one_line(exc))
            raise
        store.end_claim(event_id, item.id)


def set_pinned(store: Store, ref: str, pinned: bool, actor: str) -> Checkpoint:
    c = store.get(ref)
    store.set_pinned(c.id, pinned, actor)
    return store.get(str(c.id))


def parse_older_than(text: str | None, config: Config) -> float:
    """`--older-than`: None (not given) means the config's grace period; any text given, an
    empty one included, must be a duration (a mistyped `--older-than "$DAYS"` never purges
    by the default silently)."""
    try:
        return config.purge_after_seconds if text is None else parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None


def _checkpoints(store: Store, root: str, run: str) -> list[Checkpoint]:
    """The checkpoints of run `run` itself (a listing's `run` covers the runs below it too)."""
    found = store.list(ListQuery(run=run, root=root))
    return [c for c in found if c.run == run and c.status not in _GONE]


def _previous_generations(config: Config, found: list[Checkpoint]) -> dict[int, str]:
    kept = [
        Kept(c.id, c.version_of, c.generation)
        for c in found
        if c.version_of is not None and c.status == CheckpointStatus.OK
    ]
    return previous_generations(kept, config.versions.keep_previous)


def _versions_policy(config: Config, kept: list[Checkpoint]) -> retention.Policy:
    """For a run without a retention policy, its versions: the best by `versions.metric`
    (default val_loss, else loss, whichever they have), beside the previous generations."""
    metric = config.versions.metric or next(
        (m for m in ("val_loss", "loss") if any(m in c.metrics for c in kept)), "val_loss"
    )
    return retention.Policy(keep_best=(retention.KeepBest(metric, 1, keep_missing=False),))


def _item(c: Checkpoint, demotable: bool, protected: str | None = None) -> retention.Item:
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
        # Without its optimizer state a checkpoint is about its weights plus the config.
        inference_bytes=c.size_bytes - (c.optimizer_bytes or 0) if demotable else None,
        protected=protected,
    )


def _demotable(c: Checkpoint) -> bool:
    from .artifacts import SPLITTABLE

    return c.format in SPLITTABLE and (c.optimizer_bytes or 0) > 0
