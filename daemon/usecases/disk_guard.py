"""The disk-pressure guard's acts: which filesystems are guarded, how full each is, the plan of
`core.disk_guard` from the catalog, and its steps carried out on the rail (`usecases.rail`).

Roots on one filesystem (same `st_dev`) share one guard, with the largest threshold of theirs
(the strictest). Every act goes through the rail, as retention's do: the run's lease, a claim in
the catalog, the re-check of the file against what was indexed, fsops' trash and purge, and an
audit event whose reason says "disk pressure" and why this one (`ckpt log`). Demotion is
artifacts' split, then the full file to the trash and purged; a tier act is
`usecases.tier.tiering`'s (uploaded, verified, recorded, then the local copy trashed), then purged.
When the object store fails a tier act (unreachable after its retries), the rest of the pass is
planned again without tiering. After each act the filesystem is measured again: the guard stops
as soon as it is back above its threshold.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import disk_guard, retention
from ..core.disk_guard import GuardPlan, MinFree, OwnFile, RunFacts, Step, TrashEntry, is_copy
from ..core.errors import CkptError, RemoteFailed
from ..core.model import Checkpoint, CheckpointStatus
from ..core.pipeline import OPEN_STATES
from ..core.resume import may_resume_listed
from ..fs import fsops, temp_names
from ..settings.config import Config, RootConfig

if TYPE_CHECKING:  # SQLAlchemy: `ckpt status` reads the disk state without paying for it
    from ..catalog.store import Acting, Acts, Reads, StageJobs, UsageReads
    from ..catalog.store_stage_jobs import StageJob

_NOT_ON_DISK = {CheckpointStatus.MISSING, CheckpointStatus.REMOVED, CheckpointStatus.PURGED}


@dataclass(frozen=True)
class Guarded:
    """One filesystem the guard watches: its roots and its threshold."""

    dev: int
    roots: tuple[str, ...]
    min_free: MinFree


@dataclass(frozen=True)
class Usage:
    free: int  # for unprivileged users (f_bavail): what a trainer not running as root gets
    total: int
    used: int


@dataclass
class Relief:
    """What one pass of the guard did on one filesystem."""

    plan: GuardPlan
    done: list[Step] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    free_after: int = 0
    starved: bool = False  # a catalog write failed for lack of space (usecases.catalog_room)
    # Checkpoints whose pending stages were given up: {id, path, run, action, stages}
    gave_up: list[dict[str, Any]] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(step.frees for step in self.done)


def guarded(config: Config) -> list[Guarded]:
    """The guarded filesystems: roots with a `min_free` (their own or the top-level one) that
    exist, grouped by device."""
    groups: dict[int, tuple[list[str], list[MinFree]]] = {}
    for root in config.roots:
        wanted = config.min_free_for(root)
        dev = _device(root)
        if wanted is None or dev is None:
            continue
        paths, thresholds = groups.setdefault(dev, ([], []))
        paths.append(str(root.path))
        thresholds.append(wanted)
    out = []
    for dev, (paths, thresholds) in groups.items():
        total = usage(paths[0]).total
        strictest = max(thresholds, key=lambda m: m.threshold(total))
        out.append(Guarded(dev, tuple(paths), strictest))
    return out


def usage(path: str) -> Usage:
    st = os.statvfs(path)
    return Usage(
        free=st.f_bavail * st.f_frsize,
        total=st.f_blocks * st.f_frsize,
        used=(st.f_blocks - st.f_bfree) * st.f_frsize,
    )


def thresholds(config: Config) -> dict[str, int]:
    """root -> the guard's threshold in bytes (0: not guarded), for the min_free gauge."""
    out = dict.fromkeys((str(r.path) for r in config.roots), 0)
    for fs in guarded(config):
        limit = fs.min_free.threshold(usage(fs.roots[0]).total)
        out.update(dict.fromkeys(fs.roots, limit))
    return out


def status(
    config: Config, reported: list[dict[str, Any]], *, running: bool = True
) -> list[dict[str, Any]]:
    """`ckpt status`'s disk lines: per guarded filesystem, free space and the threshold measured
    now, and the state the running daemon `reported` in its last heartbeat."""
    out = []
    for fs in guarded(config):
        now = usage(fs.roots[0])
        threshold = fs.min_free.threshold(now.total)
        heard = next((r for r in reported if set(r.get("roots", ())) == set(fs.roots)), None)
        if now.free >= threshold:
            state, why = "ok", None
        elif not running:
            state, why = "pressure", "no daemon is running to free space"
        elif heard is not None and heard.get("state") == "cannot free":
            state, why = "cannot free", heard.get("why")
        else:
            state, why = "pressure", None  # the daemon's next pass acts on it
        out.append(
            {
                "roots": list(fs.roots),
                "free_bytes": now.free,
                "min_free_bytes": threshold,
                "min_free": fs.min_free.describe(),
                "state": state,
                "why": why,
                "since": heard.get("since") if heard else None,
                "freed_bytes": int(heard.get("freed_bytes") or 0) if heard else 0,
                # pipeline stages the guard gave up this episode: [{path, run, action, stages}]
                "gave_up": list(heard.get("gave_up") or []) if heard else [],
            }
        )
    return out


def plan_for(
    config: Config,
    reads: Reads,
    acts: Acts,
    catalog_usage: UsageReads,
    stage_jobs: StageJobs,
    fs: Guarded,
    *,
    tiering: bool = True,
) -> GuardPlan:
    """The plan for `fs` as it is now (nothing acted); `tiering`: tier acts may be planned."""
    now = usage(fs.roots[0])
    threshold = fs.min_free.threshold(now.total)
    runs = [
        _facts(config, reads, stage_jobs, root, name, tiering)
        for _run_id, root, name in reads.run_keys()
        if root in fs.roots
    ]
    trash = [
        TrashEntry(t.id, t.path, t.bytes, t.trashed_at, t.pinned)
        for t in acts.trashed()
        if t.root in fs.roots
    ]
    other = max(0, now.used - _catalogued_bytes(catalog_usage, fs.roots))
    ours = [*_leftover_temps(fs.roots), *_spare_artifacts(catalog_usage, fs.roots)]
    return disk_guard.plan(now.free, threshold, runs, trash, other_bytes=other, ours=ours)


def _leftover_temps(roots: tuple[str, ...]) -> list[OwnFile]:
    """Our temp files and folders whose writer is gone (a killed copy, split, fetch)."""
    found = []
    for root in roots:
        for path in temp_names.stale_temps(Path(root), time.time()):
            try:
                size = _bytes_of(path)
            except OSError:
                continue
            found.append(OwnFile("temp", 0, str(path), size))
    return found


def _bytes_of(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_blocks * 512
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*")) + path.lstat().st_blocks * 512


def _spare_artifacts(catalog_usage: UsageReads, roots: tuple[str, ...]) -> list[OwnFile]:
    return [
        OwnFile("artifact", cid, path, size)
        for cid, path, size in catalog_usage.spare_artifacts(roots)
    ]


def relieve(
    config: Config,
    store: Acting,
    fs: Guarded,
    *,
    actor: str,
    should_stop: Callable[[], bool] = lambda: False,
    before_acting: Callable[[GuardPlan], None] = lambda _plan: None,
) -> Relief:
    """Plan and act until `fs` is back above its threshold (measured again after each act);
    `before_acting` sees the plan first (the service warns of one that cannot be met)."""
    from . import guards, rail

    planned = partial(plan_for, config, store.reads, store.acts, store.usage, store.stage_jobs, fs)
    relief = Relief(planned())
    if relief.plan.steps:
        before_acting(relief.plan)
    threshold = relief.plan.threshold
    batch = rail.batch_name("guard")
    steps, tiering = list(relief.plan.steps), True
    while steps:
        step = steps.pop(0)
        if should_stop() or usage(fs.roots[0]).free >= threshold:
            break
        try:
            stages = act(config, store, step, batch, actor)
            relief.done.append(step)
            if stages:
                relief.gave_up.append(
                    {"id": step.id, "path": step.path, "run": step.run}
                    | {"action": step.action, "stages": stages}
                )
        except Exception as exc:
            if not isinstance(exc, (CkptError, OSError, KeyError)):
                from ..catalog import db

                if not db.out_of_space(exc):
                    raise
                relief.starved = True  # the catalog's disk is full: the caller gives it room
            relief.failures.append(
                {"id": step.id, "path": step.path, "error": guards.one_line(exc)}
            )
            if relief.starved:
                break
            if isinstance(exc, RemoteFailed) and tiering:  # the store failing: plan without it
                tiering = False
                relief.plan = planned(tiering=False)
                steps = list(relief.plan.steps)
    relief.free_after = usage(fs.roots[0]).free
    return relief


def act(config: Config, store: Acting, step: Step, batch: str, actor: str) -> list[str]:
    """One step of a plan that trashes or demotes a checkpoint, on the rail: refused if the
    catalog says otherwise now (pinned, not `ok`, its run's newest), then trashed (a demotion
    split first) and purged at once, with the step's reason. Returns the pipeline stages it
    gave up: the jobs pending or running on the checkpoint, cancelled saying so."""
    from . import guards, pruner, rail
    from .retention_plan import planner_item, run_checkpoints

    if step.action == "purge":
        purge_early(config, store, step.id, step.reason, actor)
        return []
    if step.action == "remove" and step.id == 0:  # a leftover temp of ours: no row, no lease
        fsops.remove_stale_temps(Path(step.path).parent, recursive=False)
        return []
    c = store.reads.get(str(step.id))
    if step.action == "remove":  # an artifact of ours beside a checkpoint whole at its path
        if c.status != CheckpointStatus.OK:
            raise fsops.Refused(f"{c.path} is {c.status.value} now: its artifact is kept")
        rail.remove_artifact(config, store, c, Path(step.path), reason=step.reason, actor=actor)
        return []
    # The plan was made from a snapshot: pinned or no longer ok meanwhile, it is left alone
    # (a kept copy may be standby: it holds what its file holds).
    spare = c.version_of is not None and c.status == CheckpointStatus.STANDBY
    if (c.status != CheckpointStatus.OK and not spare) or c.pinned:
        raise fsops.Refused(f"{c.path} is {'pinned' if c.pinned else c.status.value} now")
    # The executor's rail, whatever the plan said: never a run's newest as the catalog has it now
    # (a kept copy is no training moment: never the newest, and it goes whole, first).
    ok = [planner_item(x, False) for x in run_checkpoints(store.reads, c.root, c.run)]
    files = [i for i in ok if i.status == CheckpointStatus.OK.value and not is_copy(i)]
    if c.version_of is None and c.id in retention.newest(files):
        raise fsops.Refused(f"refused: {c.path} is its run's newest checkpoint now")
    if c.version_of is not None and step.action != "trash":
        raise fsops.Refused(f"refused: {c.path} is a kept copy: freed whole, never {step.action}d")
    decision = retention.Decision(c.id, c.path, step.action, (step.reason,), step.frees)
    waiting = [j for j in store.stage_jobs.list(checkpoint_id=c.id) if j.state in OPEN_STATES]
    with rail.run_lease(config, store, guards.run_id(store.reads, c), actor) as lease:
        pruner.trash_decided(config, store, c, decision, batch, actor, lease)
    why = f"given up by the disk guard ({step.action}): {step.reason}"
    given_up = _give_up(store.stage_jobs, waiting, why)
    purge_early(config, store, c.id, step.reason, actor)
    return given_up


def _give_up(stage_jobs: StageJobs, waiting: list[StageJob], why: str) -> list[str]:
    """The stages waiting on a checkpoint whose bytes the guard just took: their jobs cancelled
    with `why` (a running one's child is killed when its lease is next renewed), also those the
    pipeline's own pass cancelled meanwhile as "gone" (the guard is why they went)."""
    given_up = []
    for job in waiting:
        if stage_jobs.set_state(
            job.id, "cancelled", only_from=(*OPEN_STATES, "cancelled"), why=why
        ):
            given_up.append(job.stage)
    return sorted(set(given_up))


def purge_early(config: Config, store: Acting, checkpoint_id: int, reason: str, actor: str) -> None:
    """Purge a trashed checkpoint before its grace period, on the rail, `reason` in its audit
    event; refused if it is no longer in the trash or is pinned, or if its remote copy, read
    back now, is not there to stand for it (`remote_verify.before_purge`)."""
    from . import rail
    from .tier.remote_verify import before_purge

    item = next(
        (t for t in store.acts.trashed(include_pinned=False) if t.id == checkpoint_id), None
    )
    if item is None:
        raise fsops.Refused(f"checkpoint {checkpoint_id} is no longer in the trash (or pinned)")
    kept = before_purge(config, store, checkpoint_id, actor=actor)
    if kept is not None:  # its remote copy is gone or other bytes: the last copy stays
        raise fsops.Refused(kept)
    rail.purge_trashed(config, store, item, actor, reason=reason)


def _facts(
    config: Config, reads: Reads, stage_jobs: StageJobs, root: str, name: str, tiering: bool
) -> RunFacts:
    from ..core.query import ListQuery
    from ..core.retention_rows import NO_REMOTE
    from .retention_plan import (
        demotable,
        own_rows,
        planner_item,
        protected_generations,
        run_checkpoints,
        tier_blocked,
        versions_policy,
    )

    found = run_checkpoints(reads, root, name)
    previous = protected_generations(config, found)
    policy, _ = config.policy_for(root, name)
    logged = {metric for c in found for metric in c.metrics}
    best = list(disk_guard.best_metrics(policy.keep_best if policy else (), logged))
    versions = [c for c in found if c.version_of is not None]
    if versions:  # the best version, by the metric versions are kept by
        metric = versions_policy(config, versions).keep_best[0]
        if (metric.metric, metric.resolved_mode) not in best:
            best.append((metric.metric, metric.resolved_mode))
    items = tuple(
        planner_item(
            c,
            demotable(c) and c.version_of is None,  # a copy of ours goes whole, first
            previous.get(c.id),
            tier_blocked(config, c) if tiering else NO_REMOTE,
        )
        for c in found
    )
    # Standby copies (what their file holds now: listed as the file) are ours to free too.
    standby = own_rows(
        reads.list(ListQuery(run=name, root=root, status=CheckpointStatus.STANDBY.value)), name
    )
    items += tuple(planner_item(c, False) for c in standby if c.version_of is not None)
    kept_by: dict[int, str] = {}
    if policy is not None and items:
        decided = retention.plan(items, policy).decisions
        kept_by = {d.id: ", ".join(d.reasons) for d in decided if d.action == "keep"}
    waiting = stage_jobs.open_for([c.id for c in found]) if config.pipeline else {}
    pending = {i: tuple(sorted(set(stages))) for i, stages in waiting.items()}
    return RunFacts(name, items, tuple(best), _last_resumable(found), kept_by, pending)


def _last_resumable(found: list[Checkpoint]) -> int | None:
    """The furthest along of the run's ok checkpoints that may resume training
    (`core.resume.may_resume_listed`)."""
    from .retention_plan import planner_item

    ok = [c for c in found if c.status == CheckpointStatus.OK]
    files = [c for c in ok if c.version_of is None]  # a copy is no training moment
    able = [planner_item(c, False) for c in files if may_resume_listed(c)]
    return max(able, key=retention.progress_key).id if able else None


def _catalogued_bytes(catalog_usage: UsageReads, roots: tuple[str, ...]) -> int:
    rows, made = catalog_usage.usage()
    on_disk = sum(r.bytes for r in rows if r.root in roots and r.status not in _NOT_ON_DISK)
    return on_disk + sum(a.bytes for a in made if a.root in roots)


def _device(root: RootConfig) -> int | None:
    try:
        return os.stat(root.path).st_dev
    except OSError:
        return None
