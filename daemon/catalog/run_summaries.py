"""Every run's summary (`ckpt runs`, the web view's overview) from a few aggregate statements
(`run_sql`), one snapshot: counts, bytes and last save of its ok checkpoints, the newest, the
best per metric (the mode as Keras's `auto`) and its checkpoint, the statuses that flag it.

No row per checkpoint reaches Python: the work is SQL's. A reader that keeps its summaries
(`Kept`, one per `HotReads`: the web view's catalog lives as long as the view) reads the
aggregates again only for the runs whose revision moved (the database's triggers move it on any
change to a run's checkpoints or metrics: migration 0009), in the same snapshot as the
revisions: after one checkpoint was indexed, that run's, not the whole catalog's (see
docs/web.md's figures). No SQLAlchemy here: `hot_reads` runs it on either way in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..core.model import Run
from ..core.moments import rewritten_in_place
from ..core.query import default_mode
from . import run_sql
from .read_sql import IN_CHUNK, Statement

Fetch = Callable[[Statement], list[Sequence[Any]]]  # as hot_reads' (which calls this module)
Kept = dict[int, tuple[int, Run]]  # run id -> (the revision its summary was read at, summary)


def read_runs(
    fetch: Fetch,
    local: Callable[[str], str],
    decode: Callable[[Any], Any],
    kept: Kept | None = None,
) -> tuple[list[Run], Kept]:
    """Every run, ordered by root and name, and the summaries to keep for the next call (a new
    mapping: `kept` is only read, so two threads never change one); `local`: a stored path made
    local, `decode`: a JSON column's value; `kept`: the summaries read before, else none."""
    kept = kept or {}
    listed = [(int(i), int(rev), decode(d) or {}) for i, rev, d in fetch(run_sql.RUN_REVISIONS)]
    stale = [i for i, rev, _d in listed if i not in kept or kept[i][0] != rev]
    fresh: dict[int, Run] = {}
    if stale:
        # A few runs: their aggregates alone; many (or none kept yet): every run's at once.
        few = stale if len(stale) <= IN_CHUNK and len(stale) < len(listed) else None
        fresh = _summaries(fetch, few, local)
    now: Kept = {}
    for run_id, revision, _d in listed:
        if run_id in fresh:
            now[run_id] = (revision, fresh[run_id])
        elif run_id in kept and kept[run_id][0] == revision:
            now[run_id] = kept[run_id]
    runs = [_with_details(now[i][1], details) for i, _rev, details in listed if i in now]
    return runs, now


def _with_details(r: Run, derived: dict[str, Any]) -> Run:
    """What was derived for the run as a whole (the runs row itself, read every time)."""
    return dataclasses.replace(
        r,
        naming=list(derived.get("naming") or []),
        steps_per_epoch=derived.get("steps_per_epoch"),
        evidence=list(derived.get("evidence") or []),
        log_alignment=derived.get("log_alignment"),
    )


def _summaries(fetch: Fetch, runs: run_sql.RunIds, local: Callable[[str], str]) -> dict[int, Run]:
    """The summaries of `runs` (None: every run), without what `_with_details` adds."""
    totals = fetch(run_sql.run_totals(runs))
    newest: dict[int, tuple[int, str]] = {}
    for run_id, checkpoint_id, path in fetch(run_sql.run_newest(runs)):
        if run_id not in newest or checkpoint_id > newest[run_id][0]:
            newest[run_id] = (checkpoint_id, path)
    best_paths, best_values = _bests(fetch, runs)
    flags: dict[int, dict[str, int]] = {}
    unfinished: dict[int, int] = {}
    for run_id, status, count, mtime in fetch(run_sql.run_flags(runs)):
        flags.setdefault(run_id, {})[status] = int(count)
        if status in run_sql.UNFINISHED and mtime is not None:
            unfinished[run_id] = max(int(mtime), unfinished.get(run_id, int(mtime)))
    out = {}
    for run_id, root, name, count, size, newest_mtime in totals:
        found = newest.get(run_id)
        out[int(run_id)] = Run(
            name,
            local(root),
            int(count),
            int(size),
            local(found[1]) if found else None,
            {m: local(p) for m, p in best_paths.get(run_id, {}).items()},
            run_id,
            newest_mtime_ns=int(newest_mtime) if newest_mtime is not None else None,
            best_values=best_values.get(run_id, {}),
            flags=flags.get(run_id, {}),
            unfinished_mtime_ns=unfinished.get(run_id),
        )
    return out


def _bests(
    fetch: Fetch, runs: run_sql.RunIds
) -> tuple[dict[int, dict[str, str]], dict[int, dict[str, float]]]:
    """Per run, per metric: the best value and the path of the checkpoint holding it (of two
    holding it, one its trainer does not rewrite, `last.ckpt` and `best.pt` are: the file a
    script still finds there (`core.moments`); then the newest by mtime, then by id)."""
    values: dict[int, dict[str, float]] = {}
    wanted: dict[str, set[float]] = {}
    for run_id, name, low, high in fetch(run_sql.run_metric_ranges(runs)):
        value = float(low if default_mode(name) == "min" else high)
        values.setdefault(run_id, {})[name] = value
        wanted.setdefault(name, set()).add(value)
    # (run, metric) -> (stable, mtime, id, path)
    holder: dict[tuple[int, str], tuple[bool, int, int, str]] = {}
    for name, targets in wanted.items():
        for chunk in _chunks(sorted(targets)):
            for run_id, value, checkpoint_id, path, mtime in fetch(
                run_sql.metric_holders(name, chunk)
            ):
                if values.get(run_id, {}).get(name) != value:
                    continue  # another run's best value, not this run's
                stable = not rewritten_in_place(str(path).rsplit("/", 1)[-1], 1)
                key = (run_id, name)
                candidate = (stable, int(mtime), int(checkpoint_id), path)
                if key not in holder or candidate[:3] > holder[key][:3]:
                    holder[key] = candidate
    paths: dict[int, dict[str, str]] = {}
    for (run_id, name), (_stable, _mtime, _id, path) in holder.items():
        paths.setdefault(run_id, {})[name] = path
    return paths, values


def _chunks(ordered: list[float]) -> Iterable[list[float]]:
    for start in range(0, len(ordered), IN_CHUNK):
        yield ordered[start : start + IN_CHUNK]
