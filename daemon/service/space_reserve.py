"""The space reserve's watch in `ckpt serve` (run by the disk guard's thread, before it): each
filesystem of the roots is measured every second and right after each indexed file; below its
reserve (core.space_reserve), the service gives up its own bytes through
`usecases.space_reserve` until it is back above, with no configuration needed.

On a filesystem whose `min_free` is at least its reserve, the disk guard (which acts earlier,
the trash first) is in charge and the watch stays out of its way.

An episode is the time a filesystem spends below its reserve: one warning when it starts (what
the first pass freed, or that nothing of ours is left), one info line when it ends. A
filesystem where nothing of ours is left to free is planned again only after an indexed file or
every STUCK_RETRY_SECONDS. The reserve itself (which reads the catalog's biggest checkpoint) is
measured again after an indexed file or every RESERVE_REFRESH_SECONDS, not every second.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..catalog.store import Store
from ..core.units import format_size, iso_utc
from ..logs import event
from ..settings.config import Config
from ..usecases import copy_room, disk_guard, space_reserve
from ..usecases.copy_room import Filesystem
from ..usecases.space_reserve import ReserveRelief

STUCK_RETRY_SECONDS = 10.0
RESERVE_REFRESH_SECONDS = 30.0
ACTOR = "daemon:space-reserve"


def retry_due(stuck_at: float | None, poked: bool) -> bool:
    """Whether an episode's filesystem is planned again now: at each check, unless its last pass
    could not free enough (`stuck_at`); then after an indexed file or STUCK_RETRY_SECONDS."""
    return stuck_at is None or poked or time.monotonic() - stuck_at >= STUCK_RETRY_SECONDS


@dataclass
class Episode:
    since: str
    reserve: int
    freed: int = 0
    acts: int = 0
    stuck_at: float | None = None


class ReserveWatch:
    def __init__(self, store: Store, stopping: threading.Event) -> None:
        self.store, self.stopping = store, stopping
        self.episodes: dict[int, Episode] = {}
        self._reserves: dict[int, tuple[float, int]] = {}  # dev -> (measured at, bytes)

    def check(self, config: Config, *, poked: bool) -> None:
        seen = set()
        guards = {g.dev: g for g in disk_guard.guarded(config)}
        for fs in copy_room.filesystems(config):
            guard = guards.get(fs.dev)
            if guard is not None:
                threshold = guard.min_free.threshold(disk_guard.usage(fs.roots[0]).total)
                if threshold >= self._reserve(config, fs, poked):
                    continue  # min_free acts earlier, the trash first: the guard is in charge
            seen.add(fs.dev)
            self._check_one(config, fs, poked)
        for dev in set(self.episodes) - seen:
            del self.episodes[dev]

    def _reserve(self, config: Config, fs: Filesystem, poked: bool) -> int:
        now = time.monotonic()
        known = self._reserves.get(fs.dev)
        if poked or known is None or now - known[0] >= RESERVE_REFRESH_SECONDS:
            known = (now, copy_room.reserve_of(config, self.store.usage, fs))
            self._reserves[fs.dev] = known
        return known[1]

    def _check_one(self, config: Config, fs: Filesystem, poked: bool) -> None:
        reserve = self._reserve(config, fs, poked)
        free = disk_guard.usage(fs.roots[0]).free
        episode = self.episodes.get(fs.dev)
        if free >= reserve:
            if episode is not None:
                self._end(fs, episode, free)
            return
        if episode is None:
            episode = Episode(iso_utc(time.time()), reserve)
            self.episodes[fs.dev] = episode
            relief = self._relieve(config, fs, episode, reserve)
            event(
                "space_reserve_low",
                level=logging.WARNING,
                roots=",".join(fs.roots),
                free=format_size(free),
                reserve=format_size(reserve),
                freed=format_size(relief.freed),
                free_after=format_size(relief.free_after),
                plan=relief.plan.explain(),
            )
        elif retry_due(episode.stuck_at, poked):
            self._relieve(config, fs, episode, reserve)

    def _relieve(
        self, config: Config, fs: Filesystem, episode: Episode, reserve: int
    ) -> ReserveRelief:
        relief = space_reserve.relieve(
            config, self.store, fs, reserve, actor=ACTOR, should_stop=self.stopping.is_set
        )
        episode.freed += relief.freed
        episode.acts += len(relief.done)
        for step in relief.done:
            event(
                "space_reserve_freed",
                level=logging.INFO,
                step=step.which,
                action=step.action,
                path=step.path,
                bytes=step.frees,
            )
        for failure in relief.failures:
            event("space_reserve_skipped", level=logging.INFO, **failure)
        stuck = relief.free_after < reserve and (not relief.plan.enough or not relief.done)
        episode.stuck_at = time.monotonic() if stuck else None
        return relief

    def _end(self, fs: Filesystem, episode: Episode, free: int) -> None:
        del self.episodes[fs.dev]
        event(
            "space_reserve_end",
            roots=",".join(fs.roots),
            since=episode.since,
            freed=format_size(episode.freed),
            acts=episode.acts,
            free=format_size(free),
            reserve=format_size(episode.reserve),
        )
