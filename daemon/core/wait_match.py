"""Which checkpoint `ckpt wait` was waiting for: the pure choice among a run's `ok` rows.

A checkpoint is new when it is past `newer_than` (its step, else its epoch), or past the
checkpoint `after` names (further along, or at the same point and written later), or, with
neither, not among the rows (and generations) the catalog held when the wait began. With a
metric, it must also hold that metric better than `better_than` (`mode`: min or max). Of the
new ones the furthest along is the answer, a file of that moment its trainer does not rewrite
first (`core.moments.rewritten_in_place`). A new checkpoint whose weights the integrity stage
found non-finite is passed over (`core.health`), and one whose integrity verdict is still to
come (`details[core.health.PENDING]`) is not answered yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from posixpath import basename

from .health import PENDING, unhealthy
from .model import Checkpoint
from .moments import preferred_over, rewritten_in_place


@dataclass(frozen=True)
class WaitFor:
    run: str
    newer_than: int | None = None  # a step (an epoch for rows without a step)
    after: Checkpoint | None = None  # the REF's row
    metric: str | None = None
    better_than: float | None = None
    mode: str = "min"
    seen: frozenset[tuple[int, int]] = frozenset()  # (id, generation) present at the start


def progress(found: Checkpoint) -> int | None:
    return found.step if found.step is not None else found.epoch


def order(found: Checkpoint) -> tuple[int, float]:
    point = progress(found)
    return (point if point is not None else -1, found.mtime)


def is_new(found: Checkpoint, wanted: WaitFor) -> bool:
    if found.version_of is not None:
        return False
    if wanted.newer_than is not None:
        point = progress(found)
        if point is None or point <= wanted.newer_than:
            return False
    elif wanted.after is not None:
        ref = wanted.after
        if found.id == ref.id and found.generation == ref.generation:
            return False
        if progress(found) is not None and progress(ref) is not None:
            if order(found) <= order(ref):
                return False
        elif found.mtime <= ref.mtime:
            return False
    elif (found.id, found.generation) in wanted.seen:
        return False
    return _good_enough(found, wanted)


def pick(rows: Iterable[Checkpoint], wanted: WaitFor) -> Checkpoint | None:
    """The furthest along of the new rows; of the files of that moment, one its trainer does
    not rewrite (the epoch file over `best.pt` or `last.ckpt` saved beside it), which says
    so in `details["preferred_over"]`."""
    new = [row for row in rows if is_new(row, wanted) and not row.details.get(PENDING)]
    sick = passed_over(new)
    new = [row for row in new if row.path not in sick]
    if not new:
        return None
    found = max(new, key=lambda row: (order(row)[0], not _rewritten(row), row.mtime))
    skipped = [{"path": p, "reason": why} for p, why in sick.items()]
    if skipped:
        found = replace(found, details={**found.details, "passed_over": skipped})
    point = progress(found)
    passed = [
        row
        for row in new
        if row.id != found.id and _rewritten(row) and point is not None and progress(row) == point
    ]
    if _rewritten(found) or not passed:
        return found
    said = preferred_over(found.path, passed[0].path, found.epoch, found.step)
    return replace(found, details={**found.details, "preferred_over": said})


def passed_over(rows: Iterable[Checkpoint]) -> dict[str, str]:
    """{path: why} of the rows whose weights the integrity stage found non-finite."""
    found = {}
    for row in rows:
        why = unhealthy(row.metrics)
        if why is not None:
            found[row.path] = why
    return found


def sick_news(rows: Iterable[Checkpoint], wanted: WaitFor) -> dict[str, str]:
    """`passed_over` of the new rows: what a wait that timed out says it did not answer."""
    return passed_over(row for row in rows if is_new(row, wanted))


def _rewritten(row: Checkpoint) -> bool:
    return rewritten_in_place(basename(row.path), row.generation)


def _good_enough(found: Checkpoint, wanted: WaitFor) -> bool:
    if wanted.metric is None:
        return True
    value = found.metrics.get(wanted.metric)
    if value is None:
        return False
    if wanted.better_than is None:
        return True
    return value < wanted.better_than if wanted.mode == "min" else value > wanted.better_than
