"""A run's newest: what retention, the executor's rail and the disk guard never take, whatever
the rules say. Pure.

Issue 39: retention that counts training moments never takes what a trainer resumes from. Kept
copies of rewritten files (`.ckpt-versions`) are never any of it, and a checkpoint of unknown
progress is placed by its save time, never "newest" for being unknown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from .model import CheckpointStatus
from .moments import progress_key, training_moments
from .retention_rows import Item


def _age(item: Item) -> tuple[float, int]:
    return (item.mtime, item.id)


def placed_by_save_time(items: Sequence[Item]) -> list[Item]:
    """`items`, those of unknown progress (neither epoch nor step) in a run where others have
    one placed by when they were saved: at the furthest along known checkpoint written at or
    before them (`progress_key` sorts them just before its moment), or before every one when
    none was. So a file without an epoch is never "newest" nor "last #1" for being unknown."""

    def known(i: Item) -> bool:  # only complete checkpoints say how far the run got
        return (i.epoch is not None or i.step is not None) and i.status == CheckpointStatus.OK

    if not any(known(i) for i in items):
        return list(items)
    anchors: dict[int, tuple[float, float]] = {}
    furthest: tuple[float, float, float, int] | None = None
    for item in sorted(items, key=lambda i: (i.mtime, not known(i), i.id)):
        if known(item):
            key = progress_key(item)
            furthest = key if furthest is None else max(furthest, key)
        elif item.epoch is None and item.step is None and item.placed is None:
            anchors[item.id] = furthest[:2] if furthest else (-math.inf, -math.inf)
    return [replace(i, placed=anchors[i.id]) if i.id in anchors else i for i in items]


def newest(ok: Sequence[Item]) -> dict[int, str]:
    """{id: reason} of the checkpoints protected as a run's newest among `ok` ones: the
    furthest along by `progress_key` and every other file of its training moment, the last
    written (mtime) if that is another one, the furthest along that training can resume
    from, and the files its trainer saves to again (`Item.trainer_file`); when some are only
    in the object store, the local ones' newest too (the executor's rail never frees those).
    Kept copies (`Item.copy`) are never any of these. The planner, the executor's rail and
    the disk guard use this same function."""
    ok = placed_by_save_time([item for item in ok if not item.copy])
    if not ok:
        return {}
    found = {max(ok, key=progress_key).id: "newest"}
    moment = training_moments(ok)[0]
    if len(moment.items) > 1:
        for item_id, _, reason in moment.reasons(0, "newest training moment"):
            found.setdefault(item_id, reason)
    found.setdefault(max(ok, key=_age).id, "newest mtime")
    resumable = [item for item in ok if item.resumable]
    if resumable:
        found.setdefault(max(resumable, key=progress_key).id, "newest resumable")
    for item in ok:
        if item.trainer_file:
            found.setdefault(item.id, item.trainer_file)
    local = [item for item in ok if item.where != "remote"]  # the executor's rail judges these
    if local and len(local) < len(ok):
        found.setdefault(max(local, key=progress_key).id, "newest local")
        found.setdefault(max(local, key=_age).id, "newest local mtime")
    return found
