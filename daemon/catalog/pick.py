"""The winner of `best` and `latest`, shared by both readers (`store_reads`, `sqlite_reads`): the
first candidate, in the reader's order, whose files are still the bytes the catalog indexed.

A script resumes training or evaluates from the path these print; a file that changed behind the
catalog's back (rewritten while no daemon ran, bit rot that touched the size, a copy cut short) is
not the checkpoint the row describes. Each candidate is stat'ed beneath its root (size, newest
mtime_ns, inode of all its member files, as the indexer recorded them) before it is returned; a
changed one is skipped for the next (at most `MAX_CHANGED` of them). No SQLAlchemy here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import CkptError, NotFound, UsageError
from ..core.model import Checkpoint, FileStat, Format
from ..core.resume import Resumability, resumability
from ..fs import fsops
from .rows import LISTING_COLUMNS, to_checkpoint

# What a candidate row holds: a listing row, then the facts `latest` orders and judges by.
CANDIDATE_COLUMNS = (
    *LISTING_COLUMNS,
    ("checkpoints", "keras_version"),
    ("checkpoints", "iterations"),
)
_N = len(LISTING_COLUMNS)
_ID, _PATH, _ROOT, _FORMAT, _KIND, _SIZE, _MTIME_NS, _INODE, _OPTIMIZER_BYTES = (
    0,
    1,
    3,
    4,
    5,
    8,
    9,
    10,
    16,
)
MAX_CHANGED = 50  # candidates skipped as changed before giving up (each costs a few stats)
PAGE = 64  # candidates read per query

Row = Sequence[Any]


@dataclasses.dataclass
class Outcome:
    """The winning row (or None) and why others were passed over."""

    row: Row | None = None
    changed: list[str] = dataclasses.field(default_factory=list)  # "path: size differ"
    not_resumable: int = 0


def first_unchanged(
    pages: Callable[[int, int], Sequence[Row]],
    files_of: Callable[[int], list[str]],
    *,
    resumable: bool = False,
) -> Outcome:
    """Walk `pages(offset, limit)` (candidate rows in the reader's order) to the first row whose
    files are unchanged (and, with `resumable`, that can resume training). `files_of(id)`: the
    member file names of a multi-file checkpoint, as the catalog recorded them."""
    outcome = Outcome()
    for row in _rows(pages):
        if resumable and not judge(row).resumable:
            outcome.not_resumable += 1
            continue
        difference = changed(row, files_of)
        if difference is None:
            outcome.row = row
            return outcome
        outcome.changed.append(f"{row[_PATH]}: {difference}")
        if len(outcome.changed) >= MAX_CHANGED:
            return outcome
    return outcome


def _rows(pages: Callable[[int, int], Sequence[Row]]) -> Iterator[Row]:
    offset = 0
    while True:
        page = pages(offset, PAGE)
        yield from page
        if len(page) < PAGE:
            return
        offset += PAGE


def one_run(names: Sequence[str]) -> None:
    """`latest` without a run (`names`: up to 4 runs with ok rows): which run's training to
    resume must not be a guess."""
    if len(names) > 1:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UsageError(f"several runs have ok checkpoints ({shown}): name one with --run")


def judge(row: Row) -> Resumability:
    fmt = row[_FORMAT]
    return resumability(Format(fmt) if fmt else None, row[_KIND], row[_OPTIMIZER_BYTES], row[_N])


def changed(row: Row, files_of: Callable[[int], list[str]]) -> str | None:
    """None if the row's files are the bytes it was indexed from, else what differs."""
    path = Path(row[_PATH])
    members = [path]
    if row[_FORMAT] == Format.TF_CHECKPOINT.value:
        members = [path.parent / name for name in files_of(row[_ID])] or members
    expected = FileStat(row[_SIZE], row[_MTIME_NS], row[_INODE])
    try:
        found = fsops.current_stat(Path(row[_ROOT]), members)
    except FileNotFoundError:
        return "file missing"
    except (CkptError, OSError, ValueError) as exc:
        return f"cannot stat: {type(exc).__name__}"
    if found == expected:
        return None
    names = [n for n in ("size", "mtime_ns", "inode") if getattr(expected, n) != getattr(found, n)]
    return ", ".join(names) + " changed since indexed"


def checkpoint(outcome: Outcome, values: dict[str, float | None]) -> Checkpoint:
    """The winner as a `Checkpoint`; `details` holds what `latest` reports beside the row:
    keras_version, iterations, resumable, resume_reason, and `skipped` (changed candidates)."""
    row = outcome.row
    assert row is not None
    verdict = judge(row)
    details = {
        "keras_version": row[_N],
        "iterations": row[_N + 1],
        "resumable": verdict.resumable,
        "resume_reason": verdict.reason,
        "skipped": list(outcome.changed),
    }
    return dataclasses.replace(to_checkpoint(row[:_N], values), details=details)


def not_found(outcome: Outcome, what: str, newest: Row | None = None) -> NotFound:
    """Why there is no answer: nothing is `what`, or every candidate changed since indexed, or
    (`newest`: the newest ok row, for `--resumable`) none can resume training."""
    if outcome.changed:
        first, n = outcome.changed[0], len(outcome.changed)
        bound = f" (gave up after {MAX_CHANGED})" if n >= MAX_CHANGED else ""
        return NotFound(
            f"no {what} with its bytes unchanged since indexed: {n} candidate(s) changed"
            f"{bound}, e.g. {first}; `ckpt scan` re-indexes them"
        )
    if newest is not None:
        return NotFound(
            f"no {what} can resume training: the newest, {newest[_PATH]}, cannot "
            f"({judge(newest).reason})"
        )
    return NotFound(f"no {what}")
