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
# Where each fact is in a candidate row (runs.root is "root"; no two columns share a name).
_AT = {column: i for i, (_table, column) in enumerate(CANDIDATE_COLUMNS)}
assert len(_AT) == len(CANDIDATE_COLUMNS), "two candidate columns share a name"
MAX_CHANGED = 50  # candidates skipped as changed before giving up (each costs a few stats)
PAGE = 64  # candidates read by the first query (then twice as many each time)

Row = Sequence[Any]


@dataclasses.dataclass
class Outcome:
    """The winning row (or None) and why others were passed over."""

    row: Row | None = None
    changed: list[str] = dataclasses.field(default_factory=list)  # "PATH: size changed ..."


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
            continue  # a Keras 3 legacy .h5 with optimizer bytes: the SQL filter lets it by
        difference = changed(row, files_of)
        if difference is None:
            outcome.row = row
            return outcome
        outcome.changed.append(f"{row[_AT['path']]}: {difference}")
        if len(outcome.changed) >= MAX_CHANGED:
            return outcome
    return outcome


def _rows(pages: Callable[[int, int], Sequence[Row]]) -> Iterator[Row]:
    """Pages that double in size: the first answers almost always, and a long walk (many changed
    or non-resumable rows) costs a few sorts of the scope, not one per 64 rows."""
    offset, size = 0, PAGE
    while True:
        page = pages(offset, size)
        yield from page
        if len(page) < size:
            return
        offset, size = offset + size, size * 2


def one_run(names: Sequence[str]) -> None:
    """`latest` without a run (`names`: up to 4 runs with ok rows): which run's training to
    resume must not be a guess."""
    if len(names) > 1:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UsageError(f"several runs have ok checkpoints ({shown}): name one with --run")


def judge(row: Row) -> Resumability:
    fmt = row[_AT["format"]]
    return resumability(
        Format(fmt) if fmt else None,
        row[_AT["kind"]],
        row[_AT["optimizer_bytes"]],
        row[_AT["keras_version"]],
    )


def changed(row: Row, files_of: Callable[[int], list[str]]) -> str | None:
    """None if the row's files are the bytes it was indexed from, else what differs."""
    path = Path(row[_AT["path"]])
    members = [path]
    if row[_AT["format"]] == Format.TF_CHECKPOINT.value:
        members = [path.parent / name for name in files_of(row[_AT["id"]])] or members
    expected = FileStat(row[_AT["size_bytes"]], row[_AT["mtime_ns"]], row[_AT["inode"]])
    try:
        found = fsops.current_stat(Path(row[_AT["root"]]), members)
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
        "keras_version": row[_AT["keras_version"]],
        "iterations": row[_AT["iterations"]],
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
            f"no {what} can resume training: the newest, {newest[_AT['path']]}, cannot "
            f"({judge(newest).reason})"
        )
    return NotFound(f"no {what}")
