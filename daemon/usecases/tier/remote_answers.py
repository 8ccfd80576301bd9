"""`ckpt best` and `ckpt latest` with the object store: a checkpoint whose bytes are only in the
store (tiered, its local copy trashed or purged) can be the answer. The local winner comes
from the catalog's ordinary reads; the store's candidates are the rows of the same runs with a
verified remote copy and no local bytes; the better of the two answers (a tie: the local one,
nothing to fetch). `--fetch` then brings a remote answer back (`usecases.tier.fetching`).

`best`: the metric's best value by its mode. `latest`: the furthest along by epoch, step, then
mtime (`core.moments.progress_key`; the store's rows carry no optimizer iteration count), and
with `resumable` only those `core.resume` says training can resume from (a legacy `.h5` with
optimizer state counts, as the disk guard counts it)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.health import unhealthy
from ...core.model import Checkpoint, CheckpointStatus, Run
from ...core.moments import progress_key
from ...core.query import ListQuery, default_mode
from ...core.remote import Location, location, verified_copy
from ...core.resume import may_resume_listed
from ...core.runs import run_scope
from .locations import by_checkpoint

if TYPE_CHECKING:  # `ckpt best` without a remote never imports SQLAlchemy
    from ...catalog.store import Reads, RemoteCopies

_OFF_DISK = (CheckpointStatus.TRASHED, CheckpointStatus.PURGED)


@dataclass(frozen=True)
class Answer:
    checkpoint: Checkpoint
    location: str  # local | remote | both
    remote_url: str | None


def remote_only(
    reads: Reads, remote_copies: RemoteCopies, run: str | None
) -> list[tuple[Checkpoint, str]]:
    """(row, its verified copy's URL) of the checkpoints of `run` (and below) whose bytes are
    only in the store."""
    scope = run_scope(run) if run else None
    rows = [
        c
        for status in _OFF_DISK
        for c in reads.list(ListQuery(run=run, status=status.value))
        if c.version_of is None and (scope is None or scope.covers(c.run))
    ]
    copies = by_checkpoint(remote_copies, rows)
    found = []
    for c in rows:
        mine = copies.get(c.id, [])
        verified = verified_copy(mine)
        if verified is not None and location(c.status, mine) == Location.REMOTE:
            found.append((c, verified.url))
    return found


def best(
    reads: Reads,
    remote_copies: RemoteCopies,
    local: Callable[[], Checkpoint | None],
    metric: str,
    mode: str,
    run: str | None,
) -> Answer | None:
    """The best of the local winner (`local()`, None: none) and the store's candidates."""
    sign = 1.0 if mode == "min" else -1.0

    def value(c: Checkpoint) -> float | None:
        v = c.metrics.get(metric)
        return None if v is None or math.isnan(v) else float(v)

    remote = [
        (c, url)
        for c, url in remote_only(reads, remote_copies, run)
        if value(c) is not None and unhealthy(c.metrics) is None  # as the local winner's
    ]
    candidate = min(remote, key=lambda pair: sign * (value(pair[0]) or 0.0), default=None)
    here = local()
    if candidate is not None:
        there = value(candidate[0])
        mine = value(here) if here is not None else None
        if mine is None or (there is not None and sign * there < sign * mine):
            return Answer(candidate[0], Location.REMOTE.value, candidate[1])
    return None if here is None else Answer(here, Location.LOCAL.value, None)


def latest(
    reads: Reads,
    remote_copies: RemoteCopies,
    local: Callable[[], Checkpoint | None],
    run: str | None,
    resumable: bool,
) -> Answer | None:
    """The furthest along of the local winner and the store's candidates."""
    remote = [
        (c, url)
        for c, url in remote_only(reads, remote_copies, run)
        if not resumable or (may_resume_listed(c) and unhealthy(c.metrics) is None)
    ]
    candidate = max(remote, key=lambda pair: progress_key(pair[0]), default=None)
    here = local()
    if candidate is not None and (
        here is None or progress_key(candidate[0])[:3] > progress_key(here)[:3]
    ):
        return Answer(candidate[0], Location.REMOTE.value, candidate[1])
    return None if here is None else Answer(here, Location.LOCAL.value, None)


def runs(reads: Reads, remote_copies: RemoteCopies, found: list[Run]) -> list[Run]:
    """`ckpt runs` with the store: a run's best checkpoint per metric, and its newest, can be
    one only in the store (tiered), as `best` and `latest` answer; counts and bytes stay the
    local disk's."""
    tiered: dict[tuple[str, str], list[Checkpoint]] = {}
    for c, _url in remote_only(reads, remote_copies, None):
        tiered.setdefault((c.root, c.run), []).append(c)
    return [_with_tiered(r, tiered.get((r.root, r.name), [])) for r in found]


def _with_tiered(run: Run, tiered: list[Checkpoint]) -> Run:
    if not tiered:
        return run
    best, values = dict(run.best), dict(run.best_values)
    for c in tiered:
        for metric, value in c.metrics.items():
            if value is None or math.isnan(value) or metric not in best:
                continue  # a metric the run has no best of (no direction, or none local)
            sign = 1.0 if default_mode(metric) == "min" else -1.0
            mine = values.get(metric)
            if mine is None or sign * value < sign * mine:
                best[metric], values[metric] = c.path, float(value)
    newest = max(tiered, key=lambda c: c.mtime)  # the run's newest is by mtime too (run_sql)
    if run.newest_mtime_ns is None or newest.mtime * 1e9 > run.newest_mtime_ns:
        return dataclasses.replace(run, best=best, best_values=values, newest=newest.path)
    return dataclasses.replace(run, best=best, best_values=values)
