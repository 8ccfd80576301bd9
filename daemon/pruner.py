"""Retention use cases: plan, prune (to the trash), restore, purge.

Decisions come from the pure planner (`daemon.retention`); this module holds the safety rails:
the run's lease, a re-check of every file against the catalog right before acting (anything
changed since it was indexed is skipped), containment in a configured root (fsops), and an
audit event recorded before each filesystem call and completed after it. `dry_run` is the same
code path with the acting switched off.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon import fsops, guards, retention, store_actions
from daemon.config import Config
from daemon.errors import CkptError, NotFound, UsageError
from daemon.formats import tf_state
from daemon.model import Checkpoint, CheckpointStatus
from daemon.query import ListQuery
from daemon.store import Store
from daemon.units import iso_utc, parse_duration

LEASE_SECONDS = 600.0
_GONE = {CheckpointStatus.MISSING, CheckpointStatus.TRASHED, CheckpointStatus.PURGED}


@dataclass
class RunPlan:
    root: str
    run: str
    run_id: int
    policy: str  # where it came from, and what it says
    plan: retention.Plan


@dataclass
class PruneReport:
    dry_run: bool
    runs: list[RunPlan] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

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
                        }
                        for d in rp.plan.decisions
                    ],
                    "bytes_freed": rp.plan.bytes_freed,
                    "notes": list(rp.plan.notes),
                }
                for rp in self.runs
            ],
            "skipped": self.skipped,
            "failures": self.failures,
        }


def plan_runs(
    config: Config,
    store: Store,
    runs: list[str] | None = None,
    override: retention.Policy | None = None,
) -> PruneReport:
    report = PruneReport(dry_run=True)
    for run_id, root, name in store.run_keys():
        if runs and name not in runs:
            continue
        policy, source = (override, "command line") if override else config.policy_for(root, name)
        if policy is None:
            report.skipped.append({"run": name, "reason": "no retention policy configured"})
            continue
        items = [_item(c, _demotable(c)) for c in _checkpoints(store, root, name)]
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
) -> PruneReport:
    report = plan_runs(config, store, runs, override)
    report.dry_run = dry_run
    if dry_run:
        return report
    batch = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    for rp in report.runs:
        if rp.plan.to_trash():
            try:
                _execute(config, store, rp, batch, actor, report)
            except fsops.Refused as exc:  # a whole run refused: say so, go on with the others
                report.failures.append({"id": None, "path": rp.run, "error": str(exc)})
    return report


def _execute(
    config: Config, store: Store, rp: RunPlan, batch: str, actor: str, report: PruneReport
) -> None:
    holder = f"{actor} pid {os.getpid()}"
    with store_actions.lease(store.engine, rp.run_id, holder, LEASE_SECONDS):
        fsops.remove_stale_temps(Path(rp.root) / rp.run, recursive=False)  # of killed commands
        current = {c.id: c for c in _checkpoints(store, rp.root, rp.run)}
        _refuse_unsafe_plan(rp, current)
        for decision in rp.plan.to_trash():
            try:
                _trash(config, store, current[decision.id], decision, batch, actor)
            except (CkptError, OSError, KeyError) as exc:
                report.failures.append(
                    {"id": decision.id, "path": decision.path, "error": guards.one_line(exc)}
                )


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
) -> None:
    if c.status != CheckpointStatus.OK or c.pinned:
        raise fsops.Refused(f"{c.path} is {'pinned' if c.pinned else c.status.value} now")
    if decision.action == "demote" and c.id not in store_actions.ids_with_artifact(
        store.engine, "inference"
    ):  # the inference artifact first, then the full file goes
        from daemon.artifacts import split_checkpoint

        split_checkpoint(config, store, str(c.id), actor=actor, leased=True)
    root, members = guards.located(config, store, c)
    guards.recheck(store, c, root, members)
    reason = "; ".join(decision.reasons)
    with store_actions.audited(
        store.engine,
        action="trash",
        checkpoint_id=c.id,
        path=c.path,
        reason=reason,
        size=c.size_bytes,
        actor=actor,
    ):
        trashed = fsops.move_to_trash(root, members, batch)
        if c.format == "tf-checkpoint":
            _forget_in_state_file(root, Path(c.path))
        trash = {
            "paths": [str(p) for p in trashed],
            "at": iso_utc(time.time()),
            "batch": batch,
            "members": [str(m) for m in members],
        }
        store_actions.set_status(store.engine, c.id, CheckpointStatus.TRASHED, reason, trash=trash)


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
    c = store.get(ref)
    info = c.details.get("trash") or {}
    if c.status != CheckpointStatus.TRASHED or not info.get("paths"):
        raise UsageError(f"{c.path} is {c.status.value}, not in the trash")
    root = guards.configured_root(config, c)
    fsops.remove_stale_temps(Path(c.path).parent, recursive=False)  # of killed commands
    holder = f"{actor} pid {os.getpid()}"
    with (
        store_actions.lease(store.engine, guards.run_id(store, c), holder, LEASE_SECONDS),
        store_actions.audited(
            store.engine,
            action="restore",
            checkpoint_id=c.id,
            path=c.path,
            reason=None,
            size=c.size_bytes,
            actor=actor,
        ),
    ):
        fsops.restore(root, [Path(p) for p in info["paths"]], [Path(p) for p in info["members"]])
        store_actions.set_status(store.engine, c.id, CheckpointStatus.OK, None, clear_trash=True)
    return store.get(str(c.id))


def purge(
    config: Config, store: Store, *, older_than: float, dry_run: bool = False, actor: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Delete trashed checkpoints trashed more than `older_than` seconds ago.
    Returns (purged, failures)."""
    cutoff = iso_utc(time.time() - older_than)
    due = [t for t in store_actions.trashed(store.engine) if t.get("at", "") <= cutoff]
    if dry_run:
        return due, []
    purged, failures = [], []
    for item in due:
        try:
            _purge_one(config, store, item, actor)
            purged.append(item)
        except (CkptError, OSError) as exc:
            failures.append({"id": item["id"], "path": item["path"], "error": guards.one_line(exc)})
    return purged, failures


def _purge_one(config: Config, store: Store, item: dict[str, Any], actor: str) -> None:
    root = config.root_for(Path(item["path"]))
    if root is None or str(root.path) != item["root"]:
        raise fsops.Refused(f"{item['path']} is not inside a configured root: never touched")
    with store_actions.audited(
        store.engine,
        action="purge",
        checkpoint_id=item["id"],
        path=item["path"],
        reason=None,
        size=item["bytes"],
        actor=actor,
    ):
        fsops.purge(root.path, [Path(p) for p in item["paths"]])
        store_actions.set_status(
            store.engine, item["id"], CheckpointStatus.PURGED, "deleted from the trash"
        )


def set_pinned(store: Store, ref: str, pinned: bool, actor: str) -> Checkpoint:
    c = store.get(ref)
    store_actions.set_pinned(store.engine, c.id, pinned, actor)
    return store.get(str(c.id))


def parse_older_than(text: str | None, config: Config) -> float:
    try:
        return parse_duration(text) if text else config.purge_after_seconds
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None


def _checkpoints(store: Store, root: str, run: str) -> list[Checkpoint]:
    return [c for c in store.list(ListQuery(run=run, root=root)) if c.status not in _GONE]


def _item(c: Checkpoint, demotable: bool) -> retention.Item:
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
    )


def _demotable(c: Checkpoint) -> bool:
    from daemon.artifacts import SPLITTABLE

    return c.format in SPLITTABLE and (c.optimizer_bytes or 0) > 0
