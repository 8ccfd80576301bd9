"""The disk guard's thread in `ckpt serve`: it first runs the space reserve's watch (our own
bytes given up below the reserve, no configuration needed: service.space_reserve), then
measures each guarded filesystem (statvfs, cheap) every second and right after each indexed
file (`poke`), and when free space is below `min_free` frees space through
`usecases.disk_guard` (retention's rails) until it is back above.

An episode is the time a filesystem spends below its threshold. It logs one warning when it
starts (how far below, what the first pass freed and why, or why it cannot), calls the
`disk_pressure` hook once, and one info line when it ends (what it freed in all). Freeing a
checkpoint that pipeline stages still wait to run on gives them up: one warning per checkpoint
(`disk_guard_gave_up`, naming the stages), and the episode's list in `ckpt status`. Every act is
an audit event with its reason (`ckpt log`). A filesystem where nothing more can be freed is
planned again only after an indexed file or every STUCK_RETRY_SECONDS (as the space reserve's:
`space_reserve.retry_due`): a full disk must not turn into a catalog read per second.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..catalog.store import Store
from ..core.disk_guard import ACTIONS, GuardPlan
from ..core.units import format_size, iso_utc
from ..logs import event
from ..settings.config import Config
from ..usecases import catalog_room, disk_guard
from ..usecases.disk_guard import Guarded, Relief
from .hooks import HookRunner
from .space_reserve import ReserveWatch, retry_due

CHECK_EVERY_SECONDS = 1.0
# An episode ends once free space has stayed above min_free this long: a trainer that crosses
# it again at every save is one episode (one warning), not one per checkpoint.
QUIET_SECONDS = 60.0
ACTOR = "daemon:disk-guard"
GAVE_UP_SHOWN = 50  # of an episode's given-up stages, the newest kept for `ckpt status`


@dataclass
class Episode:
    since: str
    free_at_start: int
    threshold: int
    freed: int = 0
    acts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    failures: int = 0
    stuck_at: float | None = None  # monotonic time of the last pass that could not free enough
    above_since: float | None = None  # monotonic time free space got back above min_free
    why: str | None = None
    warned_unreachable: bool = False
    # The pipeline stages given up with the checkpoints freed: [{path, run, action, stages}]
    gave_up: list[dict[str, Any]] = field(default_factory=list)


class DiskGuard(threading.Thread):
    def __init__(
        self,
        config: Callable[[], Config],
        store: Store,
        hooks: HookRunner,
        stopping: threading.Event,
    ) -> None:
        super().__init__(name="ckpt-disk-guard", daemon=True)
        self.config, self.store, self.hooks, self.stopping = config, store, hooks, stopping
        self._wake = threading.Event()
        self.episodes: dict[int, Episode] = {}
        self.states: list[dict[str, Any]] = []  # per filesystem, for the heartbeat and status
        self.tick = time.monotonic()
        self.errors = 0
        self.quiet_seconds = QUIET_SECONDS
        # Our own bytes go first, with no configuration: the space reserve (service.space_reserve).
        self.reserve = ReserveWatch(store, stopping)

    def poke(self) -> None:
        """A file was indexed: measure now, not at the next second."""
        self._wake.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            poked = self._wake.wait(timeout=CHECK_EVERY_SECONDS)
            self._wake.clear()
            self.tick = time.monotonic()
            # a catalog hiccup must not end the guard
            self._logged("disk_guard_error", functools.partial(self.check, poked=poked))

    def _logged(self, error_event: str, step: Callable[[], object]) -> None:
        """`step()`; its failure counted and logged as `error_event`, and the guard goes on."""
        try:
            step()
        except Exception as exc:
            self.errors += 1
            event(error_event, level=logging.ERROR, error=str(exc))

    def check(self, *, poked: bool = True) -> None:
        config = self.config()
        # the reserve's failure must not keep min_free's guard away
        self._logged("space_reserve_error", lambda: self.reserve.check(config, poked=poked))
        # the catalog's room given to the guard's bookkeeping on a nearly full disk
        self._logged("catalog_room_error", lambda: catalog_room.tend(config, self._floors(config)))
        states = []
        seen = set()
        for fs in disk_guard.guarded(config):
            seen.add(fs.dev)
            states.append(self._check_one(config, fs, poked))
        for dev in set(self.episodes) - seen:  # unguarded on reload
            del self.episodes[dev]
        self.states = states

    def _check_one(self, config: Config, fs: Guarded, poked: bool) -> dict[str, Any]:
        now = disk_guard.usage(fs.roots[0])
        threshold = fs.min_free.threshold(now.total)
        episode = self.episodes.get(fs.dev)
        if now.free >= threshold:
            return self._ok(fs, episode, now.free, threshold)
        if episode is None:
            episode = Episode(iso_utc(time.time()), now.free, threshold)
            self.episodes[fs.dev] = episode
            relief = self._relieve(config, fs, episode)
            self._start(fs, episode, relief)
        elif retry_due(episode.stuck_at, poked):
            self._relieve(config, fs, episode)
        episode.above_since = None
        free = disk_guard.usage(fs.roots[0]).free
        if free >= threshold:
            return self._ok(fs, episode, free, threshold)
        state = "cannot free" if episode.stuck_at is not None else "pressure"
        return _state(fs, free, threshold, state, episode.why, episode)

    def _ok(
        self, fs: Guarded, episode: Episode | None, free: int, threshold: int
    ) -> dict[str, Any]:
        """Above min_free: an episode ends once it has stayed so QUIET_SECONDS; until then,
        `ckpt status` still says which stages it gave up."""
        if episode is not None:
            now = time.monotonic()
            if episode.above_since is None:
                episode.above_since = now
            if now - episode.above_since >= self.quiet_seconds:
                self._end(fs, episode, free)
                episode = None
        gave_up = list(episode.gave_up) if episode else []
        return _state(fs, free, threshold, "ok", None, gave_up=gave_up)

    def _floors(self, config: Config) -> dict[int, int]:
        return {
            fs.dev: fs.min_free.threshold(disk_guard.usage(fs.roots[0]).total)
            for fs in disk_guard.guarded(config)
        }

    def _relieve(self, config: Config, fs: Guarded, episode: Episode) -> Relief:
        def one_pass() -> Relief:
            return disk_guard.relieve(
                config,
                self.store,
                fs,
                actor=ACTOR,
                should_stop=self.stopping.is_set,
                before_acting=lambda plan: self._warn_unreachable(fs, episode, plan),
            )

        relief = one_pass()
        # Its catalog on the full disk: the room kept for it is released, and the pass again.
        if relief.starved and catalog_room.tend(config, self._floors(config), starved=True):
            self._count(relief, episode)
            relief = one_pass()
        return self._count(relief, episode)

    def _count(self, relief: Relief, episode: Episode) -> Relief:
        episode.freed += relief.freed
        episode.failures += len(relief.failures)
        for step in relief.done:
            episode.acts[step.action] += 1
            event(
                "disk_guard_freed",
                level=logging.DEBUG,
                action=step.action,
                path=step.path,
                bytes=step.frees,
            )
            if step.action == "tier":  # its bytes went to the object store, verified
                self.hooks.emit(
                    "tiered", path=step.path, run=step.run, reason=step.reason, bytes=step.frees
                )
        for failure in relief.failures:
            event("disk_guard_skipped", level=logging.INFO, **failure)
        for lost in relief.gave_up:  # evaluations that will not happen: said, one line each
            event(
                "disk_guard_gave_up",
                level=logging.WARNING,
                path=lost["path"],
                run=lost["run"],
                action=lost["action"],
                stages=",".join(lost["stages"]),
                reason="its bytes were freed before these stages ran on it (jobs cancelled)",
            )
            episode.gave_up.append({k: lost[k] for k in ("path", "run", "action", "stages")})
        del episode.gave_up[:-GAVE_UP_SHOWN]
        # Nothing left to free, or nothing could be done (a lease held, a file changed): ask
        # again after an indexed file or STUCK_RETRY_SECONDS, not every second.
        stuck = relief.free_after < relief.plan.threshold and (
            not relief.plan.enough or not relief.done
        )
        episode.stuck_at = time.monotonic() if stuck else None
        episode.why = relief.plan.explain() if stuck else None
        return relief

    def _warn_unreachable(self, fs: Guarded, episode: Episode, plan: GuardPlan) -> None:
        """Before the first act of an episode whose threshold all the guard may free cannot
        meet (a typo such as `min_free: 99%`): one warning, so the log says so before the
        checkpoints go. It acts anyway: whatever it frees is space a trainer may need."""
        if plan.enough or episode.warned_unreachable:
            return
        episode.warned_unreachable = True
        event(
            "min_free_unreachable",
            level=logging.WARNING,
            roots=",".join(fs.roots),
            min_free=f"{format_size(plan.threshold)} ({fs.min_free.describe()})",
            free=format_size(plan.free),
            can_free=format_size(plan.bytes_freed),
            reason="freeing every checkpoint the guard may touch leaves less than min_free "
            "(too high a min_free?): freeing them anyway",
        )

    def _start(self, fs: Guarded, episode: Episode, relief: Relief) -> None:
        reason = relief.plan.explain()
        event(
            "disk_pressure",
            level=logging.WARNING,
            roots=",".join(fs.roots),
            free=format_size(episode.free_at_start),
            min_free=format_size(episode.threshold),
            freed=format_size(relief.freed),
            free_after=format_size(relief.free_after),
            plan=reason,
            gave_up=_gave_up_text(relief.gave_up),
        )
        for root in fs.roots:
            self.hooks.disk_pressure(root, episode.free_at_start, episode.threshold, reason)

    def _end(self, fs: Guarded, episode: Episode, free: int) -> None:
        del self.episodes[fs.dev]
        acts = ", ".join(f"{n} {action}" for action, n in episode.acts.items() if n) or "none"
        event(
            "disk_pressure_end",
            roots=",".join(fs.roots),
            since=episode.since,
            freed=format_size(episode.freed),
            acts=acts,
            skipped=episode.failures,
            gave_up=_gave_up_text(episode.gave_up),
            free=format_size(free),
            min_free=format_size(episode.threshold),
        )


def _state(
    fs: Guarded,
    free: int,
    threshold: int,
    state: str,
    why: str | None,
    episode: Episode | None = None,
    *,
    gave_up: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "roots": list(fs.roots),
        "free_bytes": free,
        "min_free_bytes": threshold,
        "min_free": fs.min_free.describe(),
        "state": state,
        "why": why,
        "since": episode.since if episode else None,
        "freed_bytes": episode.freed if episode else 0,
        "gave_up": list(episode.gave_up) if episode else list(gave_up or []),
    }


def _gave_up_text(gave_up: list[dict[str, Any]]) -> str:
    """`eval,export on /r/a/e01.keras; eval on /r/a/e02.keras`, or `none`."""
    said = [f"{','.join(g['stages'])} on {g['path']}" for g in gave_up]
    return "; ".join(said) or "none"
