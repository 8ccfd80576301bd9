"""Every run's summary (`ckpt runs`, the web view's overview) from a few aggregate statements
(`read_sql`'s RUN_*), one snapshot: counts, bytes and last save of its ok checkpoints, the newest,
the best per metric (the mode as Keras's `auto`) and its checkpoint, the statuses that flag it.

No row per checkpoint reaches Python: the work is SQL's (100,000 checkpoints: see
docs/web.md's figures). No SQLAlchemy here: `hot_reads` runs it on either way in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.model import Run
from ..core.query import default_mode
from . import read_sql
from .read_sql import Statement

Fetch = Callable[[Statement], list[Sequence[Any]]]  # as hot_reads' (which calls this module)


def read_runs(fetch: Fetch, local: Callable[[str], str], decode: Callable[[Any], Any]) -> list[Run]:
    """Every run, ordered by root and name; `local`: a stored path made local, `decode`: a JSON
    column's value."""
    totals = fetch(read_sql.RUN_TOTALS)
    details = {run_id: decode(d) or {} for run_id, d in fetch(read_sql.RUN_DETAILS)}
    newest: dict[int, tuple[int, str]] = {}
    for run_id, checkpoint_id, path in fetch(read_sql.RUN_NEWEST):
        if run_id not in newest or checkpoint_id > newest[run_id][0]:
            newest[run_id] = (checkpoint_id, path)
    best_paths, best_values = _bests(fetch)
    flags: dict[int, dict[str, int]] = {}
    unfinished: dict[int, int] = {}
    for run_id, status, count, mtime in fetch(read_sql.RUN_FLAGS):
        flags.setdefault(run_id, {})[status] = int(count)
        if status in read_sql.UNFINISHED and mtime is not None:
            unfinished[run_id] = max(int(mtime), unfinished.get(run_id, int(mtime)))
    out = []
    for run_id, root, name, count, size, newest_mtime in totals:
        derived = details.get(run_id) or {}
        found = newest.get(run_id)
        out.append(
            Run(
                name,
                local(root),
                int(count),
                int(size),
                local(found[1]) if found else None,
                {m: local(p) for m, p in best_paths.get(run_id, {}).items()},
                run_id,
                naming=list(derived.get("naming") or []),
                steps_per_epoch=derived.get("steps_per_epoch"),
                evidence=list(derived.get("evidence") or []),
                newest_mtime_ns=int(newest_mtime) if newest_mtime is not None else None,
                best_values=best_values.get(run_id, {}),
                flags=flags.get(run_id, {}),
                unfinished_mtime_ns=unfinished.get(run_id),
            )
        )
    return out


def _bests(fetch: Fetch) -> tuple[dict[int, dict[str, str]], dict[int, dict[str, float]]]:
    """Per run, per metric: the best value and the path of the checkpoint holding it (of two
    holding it, the newest by mtime, then by id)."""
    values: dict[int, dict[str, float]] = {}
    wanted: dict[str, set[float]] = {}
    for run_id, name, low, high in fetch(read_sql.RUN_METRIC_RANGES):
        value = float(low if default_mode(name) == "min" else high)
        values.setdefault(run_id, {})[name] = value
        wanted.setdefault(name, set()).add(value)
    holder: dict[tuple[int, str], tuple[int, int, str]] = {}  # (run, metric) -> (mtime, id, path)
    for name, targets in wanted.items():
        ordered = sorted(targets)
        for start in range(0, len(ordered), read_sql.IN_CHUNK):
            chunk = ordered[start : start + read_sql.IN_CHUNK]
            for run_id, value, checkpoint_id, path, mtime in fetch(
                read_sql.metric_holders(name, chunk)
            ):
                if values.get(run_id, {}).get(name) != value:
                    continue  # another run's best value, not this run's
                key, candidate = (run_id, name), (int(mtime), int(checkpoint_id), path)
                if key not in holder or candidate[:2] > holder[key][:2]:
                    holder[key] = candidate
    paths: dict[int, dict[str, str]] = {}
    for (run_id, name), (_mtime, _id, path) in holder.items():
        paths.setdefault(run_id, {})[name] = path
    return paths, values
