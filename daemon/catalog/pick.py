"""The winner of `best` and `latest`, shared by both readers (`store_reads`, `sqlite_reads`): the
first candidate, in the reader's order, whose files are still the bytes the catalog indexed.

A script resumes training or evaluates from the path these print; a file that changed behind the
catalog's back (rewritten while no daemon ran, bit rot that touched the size, a copy cut short) is
not the checkpoint the row describes. Each candidate is stat'ed beneath its root (size, newest
mtime_ns, inode of all its member files, as the indexer recorded them) before it is returned; a
changed one is skipped for the next (at most `MAX_CHANGED` of them), and so is one whose
weights the integrity stage found non-finite (`core.health`; `best`, `latest --resumable`).
Whether a candidate can
resume training is `core.resume`'s one rule, judged on the row and, for the formats whose answer
depends on it (a `.keras` whose compile config lost its optimizer), its `details`. No SQLAlchemy
here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import CkptError, NotFound, UsageError
from ..core.families import folder_formats
from ..core.health import unhealthy
from ..core.model import Checkpoint, FileStat, Format
from ..core.moments import rewritten_in_place
from ..core.resume import Resumability, optimizer_config_lost, resumability
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
MAX_PASSED_OVER = 20  # newer candidates that cannot resume, listed with why (`latest --json`)
PAGE = 64  # candidates read by the first query (then twice as many each time)

Row = Sequence[Any]


@dataclasses.dataclass
class Outcome:
    """The winning row (or None) and why others were passed over."""

    row: Row | None = None
    changed: list[str] = dataclasses.field(default_factory=list)  # "PATH: size changed ..."
    verdict: Resumability | None = None  # the winner's
    # Candidates passed over before the winner, {"path", "reason"}, in the reader's order: with
    # `resumable`, those that cannot resume; with `health_of`, those with non-finite weights.
    passed_over: list[dict[str, str]] = dataclasses.field(default_factory=list)


Details = dict[str, Any]


def first_unchanged(
    pages: Callable[[int, int], Sequence[Row]],
    details_of: Callable[[int], Details],
    *,
    resumable: bool = False,
    metrics_of: Callable[[int], dict[str, float | None]] | None = None,
) -> Outcome:
    """Walk `pages(offset, limit)` (candidate rows in the reader's order) to the first row whose
    files are unchanged (and, with `resumable`, that can resume training; with `metrics_of(id)`,
    its integrity metrics, whose weights were not found non-finite). `details_of(id)`: the
    row's `details` (member file names of a multi-file checkpoint, the optimizer config), read
    only for the formats that need them."""
    outcome = Outcome()
    for row in _rows(pages):
        details = details_of(row[_AT["id"]]) if _needs_details(row) else {}
        verdict = judge(row, details)
        # A Keras 3 legacy .h5 or a .keras without its optimizer config: the SQL lets it by.
        why = None if not resumable or verdict.resumable else verdict.reason
        if why is None and metrics_of is not None:
            why = unhealthy(metrics_of(row[_AT["id"]]))
        if why is not None:
            if len(outcome.passed_over) < MAX_PASSED_OVER:
                outcome.passed_over.append({"path": row[_AT["path"]], "reason": why})
            continue
        difference = changed(row, list(details.get("files") or []))
        if difference is None:
            outcome.row, outcome.verdict = row, verdict
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


def rewritten(row: Row) -> bool:
    """Whether the candidate's file is one its trainer rewrites (`core.moments`)."""
    return rewritten_in_place(str(row[_AT["path"]]).rsplit("/", 1)[-1], row[_AT["generation"]] or 1)


def one_run(names: Sequence[str]) -> None:
    """`latest` without a run (`names`: up to 4 runs with ok rows): which run's training to
    resume must not be a guess."""
    if len(names) > 1:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UsageError(f"several runs have ok checkpoints ({shown}): name one with --run")


def _needs_details(row: Row) -> bool:
    return _membered(row[_AT["format"]]) or row[_AT["format"]] == Format.KERAS_ZIP


def _membered(fmt: str | None) -> bool:
    return fmt == Format.TF_CHECKPOINT or fmt in folder_formats()


def judge(row: Row, details: Details | None = None) -> Resumability:
    """`core.resume`'s verdict on a candidate row (`details`: its details, when read)."""
    fmt = Format(row[_AT["format"]]) if row[_AT["format"]] else None
    return resumability(
        fmt,
        row[_AT["kind"]],
        row[_AT["optimizer_bytes"]],
        row[_AT["keras_version"]],
        optimizer_config_lost=optimizer_config_lost(fmt, details),
    )


def changed(row: Row, files: list[str]) -> str | None:
    """None if the row's files are the bytes it was indexed from, else what differs. `files`:
    the member file names of a multi-file checkpoint, as the catalog recorded them."""
    path = Path(row[_AT["path"]])
    members = [path]
    # Multi-file checkpoints were stat'ed over their members (recorded relative to the parent)
    if _membered(row[_AT["format"]]):
        members = [path.parent / name for name in files] or members
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
    keras_version, iterations, resumable, resume_reason, `skipped` (changed candidates) and
    `passed_over` (newer candidates that cannot resume, with why)."""
    row = outcome.row
    assert row is not None
    verdict = outcome.verdict or judge(row)
    details = {
        "keras_version": row[_AT["keras_version"]],
        "iterations": row[_AT["iterations"]],
        "resumable": verdict.resumable,
        "resume_reason": verdict.reason,
        "skipped": list(outcome.changed),
        "passed_over": list(outcome.passed_over),
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
    if newest is None and outcome.passed_over:
        sick, n = outcome.passed_over[0], len(outcome.passed_over)
        return NotFound(
            f"no {what} with finite weights: {n} passed over, e.g. {sick['path']}: {sick['reason']}"
        )
    if newest is not None:
        judged = {p["path"]: p["reason"] for p in outcome.passed_over}
        reason = judged.get(newest[_AT["path"]]) or judge(newest).reason
        return NotFound(
            f"no {what} can resume training: the newest, {newest[_AT['path']]}, cannot ({reason})"
        )
    return NotFound(f"no {what}")
