"""The space reserve's acts (core.space_reserve decides): whether a capture fits, and giving up
our own bytes when a filesystem's free space falls below its reserve.

Every root counts, configured or not: roots on one filesystem (same `st_dev`) share one reserve.
The reserve's acts are the disk guard's steps on the rail (`usecases.rail`: the run's lease, a
claim in the catalog, the re-check of the file against what was indexed, fsops' trash and purge,
an audit event whose reason says "low free space" and why this one: `ckpt log`), and only ever
touch what is ours: versions and the trash. After each act the filesystem is measured again:
the pass stops as soon as free space is back above the reserve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core import disk_guard as guard_core
from ..core import space_reserve
from ..core.errors import CkptError
from ..core.model import Checkpoint, CheckpointStatus
from ..core.space_reserve import Ours, ReservePlan, Step
from ..core.units import iso_utc
from ..core.versions import is_version_path
from ..settings.config import Config, RootConfig
from . import disk_guard
from .copy_room import Filesystem, filesystems, room_to_keep

if TYPE_CHECKING:
    from ..catalog.store import Acting, Acts, Reads


@dataclass
class ReserveRelief:
    """What one pass did on one filesystem."""

    plan: ReservePlan
    done: list[Step] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    free_after: int = 0

    @property
    def freed(self) -> int:
        return sum(step.frees for step in self.done)


def budget_refusal(
    config: Config, store: Acting, root: RootConfig, size: int, *, actor: str
) -> str | None:
    """Why a copy of `size` bytes into `root` would take our copies beyond `versions.budget`
    (None: it fits). Over it, kept versions older than their file's previous generation give
    way first (the best one of each file last: `old_version`, trashed and purged), oldest
    first, until the new copy fits; if that is not enough, the reason."""
    fs = next((f for f in filesystems(config) if str(root.path) in f.roots), None)
    if fs is None:
        return None

    def measured() -> tuple[int, int, int]:  # free, kept, budget
        free = disk_guard.usage(fs.roots[0]).free
        kept = store.usage.kept_copies_bytes(fs.roots)
        return free, kept, space_reserve.budget_bytes(config.versions.budget, free, kept)

    free, kept, budget = measured()
    if space_reserve.budget_refusal(kept, size, budget) is None:
        return None
    relieve(  # measured by free space: each old version given up frees its bytes
        config,
        store,
        fs,
        free + kept + size - budget,
        actor=actor,
        only=("old_version",),
        goal="the free space at which a new copy fits versions.budget",
    )
    _free, kept, budget = measured()
    return space_reserve.budget_refusal(kept, size, budget)


def make_room(config: Config, store: Acting, root: RootConfig, size: int, *, actor: str) -> int:
    """Before a capture of `size` bytes is skipped: versions in the trash (retention let them
    go) are purged, oldest trashed first, until the copy fits with the reserve left over.
    Returns the bytes freed."""
    fs = next((f for f in filesystems(config) if str(root.path) in f.roots), None)
    if fs is None:
        return 0
    needed = size + room_to_keep(config, store.usage, fs, root)[0]
    relief = relieve(
        config,
        store,
        fs,
        needed,
        actor=actor,
        only=("version_trash",),
        goal="the copy of a new generation + reserve",
    )
    return relief.freed


def plan_for(
    config: Config,
    reads: Reads,
    acts: Acts,
    fs: Filesystem,
    reserve: int,
    *,
    only: Sequence[str] = space_reserve.STEPS,
    goal: str = "reserve",
) -> ReservePlan:
    """The plan for `fs` as it is now (nothing acted)."""
    free = disk_guard.usage(fs.roots[0]).free
    trashed = [
        Ours(t.id, t.path, t.bytes, t.trashed_at, version=is_version_path(t.path))
        for t in acts.trashed(include_pinned=False)
        if t.root in fs.roots
    ]
    olds = (
        [
            v
            for _run_id, root, name in reads.run_keys()
            if root in fs.roots
            for v in _old_versions(config, reads, root, name)
        ]
        if "old_version" in only
        else []
    )
    return space_reserve.plan(free, reserve, trashed, olds, only=only, goal=goal)


def relieve(
    config: Config,
    store: Acting,
    fs: Filesystem,
    reserve: int,
    *,
    actor: str,
    should_stop: Callable[[], bool] = lambda: False,
    only: Sequence[str] = space_reserve.STEPS,
    goal: str = "reserve",
) -> ReserveRelief:
    """Plan and act until `fs` is back above `reserve` (measured again after each act)."""
    from . import guards, rail

    relief = ReserveRelief(
        plan_for(config, store.reads, store.acts, fs, reserve, only=only, goal=goal)
    )
    batch = rail.batch_name("reserve")
    for step in relief.plan.steps:
        if should_stop() or disk_guard.usage(fs.roots[0]).free >= reserve:
            break
        try:
            if step.action == "purge":
                disk_guard.purge_early(config, store, step.id, step.reason, actor)
            else:
                act = guard_core.Step("trash", step.id, step.path, None, step.frees, step.reason)
                disk_guard.act(config, store, act, batch, actor)
            relief.done.append(step)
        except (CkptError, OSError, KeyError) as exc:
            relief.failures.append(
                {"id": step.id, "path": step.path, "error": guards.one_line(exc)}
            )
    relief.free_after = disk_guard.usage(fs.roots[0]).free
    return relief


def _old_versions(config: Config, reads: Reads, root: str, name: str) -> list[Ours]:
    """The run's kept versions that are neither a previous generation (keep_previous) nor
    pinned nor standby; the best one of each file by the versions' metric is marked."""
    from .retention_plan import protected_generations, run_checkpoints, versions_policy

    found = run_checkpoints(reads, root, name)
    versions = [c for c in found if c.version_of is not None and c.status == CheckpointStatus.OK]
    if not versions:
        return []
    previous = protected_generations(config, found)
    rule = versions_policy(config, versions).keep_best[0]
    best = _best_per_file(versions, rule.metric, rule.resolved_mode)
    return [
        Ours(c.id, c.path, c.size_bytes, iso_utc(c.mtime), version=True, best=c.id in best)
        for c in versions
        if c.id not in previous and not c.pinned
    ]


def _best_per_file(versions: list[Checkpoint], metric: str, mode: str) -> set[int]:
    by_file: dict[str, list[tuple[float, int, int]]] = {}
    sign = 1.0 if mode == "min" else -1.0
    for c in versions:
        value = c.metrics.get(metric)
        if value is not None and value == value:  # NaN is no best
            by_file.setdefault(str(c.version_of), []).append((sign * value, -c.generation, c.id))
    return {min(of_file)[2] for of_file in by_file.values()}
