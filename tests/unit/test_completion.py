"""`core.completion`, as tables: what a reader's refusal becomes in the catalog (`verdict`), how
observations fold (`observe`), and when a pending file is indexed (`is_ready`); then the
properties that hold between the rows (a corrupt-looking file is never called corrupt before it
settled, a close never delays indexing)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core import completion
from ckpt_daemon.core.completion import Pending, is_ready, is_settled, observe, verdict
from ckpt_daemon.core.errors import (
    CorruptCheckpoint,
    NotACheckpoint,
    NotReady,
    ReadProblem,
    UnreadableCheckpoint,
)
from ckpt_daemon.core.model import CheckpointStatus, FileStat

S = 1_000_000_000  # nanoseconds in a second
WRITTEN = FileStat(size=100, mtime_ns=1000 * S, inode=7)
GREW = FileStat(size=200, mtime_ns=1001 * S, inode=7)
REPLACED = FileStat(size=100, mtime_ns=1000 * S, inode=8)  # same size and time, a new inode


# problem, seconds since the file's mtime, settle_seconds -> status, reason
VERDICTS = [
    (UnreadableCheckpoint("permission denied"), 0.0, 5, "unreadable", "permission denied"),
    (UnreadableCheckpoint("permission denied"), 60.0, 5, "unreadable", "permission denied"),
    (NotReady("locked by its writer"), 0.0, 5, "incomplete", "locked by its writer"),
    (NotReady("locked by its writer"), 3600.0, 5, "incomplete", "locked by its writer"),
    (
        CorruptCheckpoint("truncated zip"),
        1.25,
        5,
        "incomplete",
        "changed 1.2s ago, not settled yet: truncated zip",
    ),
    (
        CorruptCheckpoint("truncated zip"),
        4.99,
        5,
        "incomplete",
        "changed 5.0s ago, not settled yet: truncated zip",
    ),
    (CorruptCheckpoint("truncated zip"), 5.0, 5, "corrupt", "truncated zip"),  # exactly settled
    (CorruptCheckpoint("truncated zip"), 600.0, 5, "corrupt", "truncated zip"),
    (CorruptCheckpoint("bad superblock"), 0.0, 0, "corrupt", "bad superblock"),  # no settling
    # A clock behind the file's mtime (another host's clock, a copied mtime): never a negative age.
    (
        CorruptCheckpoint("truncated zip"),
        -3.0,
        5,
        "incomplete",
        "changed 0.0s ago, not settled yet: truncated zip",
    ),
    # Anything else a reader refuses with is corrupt at once: it is not about being written.
    (ReadProblem("unexpected layout"), 0.0, 5, "corrupt", "unexpected layout"),
    (NotACheckpoint("a dataset"), 0.0, 5, "corrupt", "a dataset"),
]


@pytest.mark.parametrize(("problem", "age", "settle", "status", "reason"), VERDICTS)
def test_verdict_table(
    problem: ReadProblem, age: float, settle: float, status: str, reason: str
) -> None:
    now_ns = WRITTEN.mtime_ns + round(age * S)
    assert verdict(problem, WRITTEN, now_ns, settle) == (CheckpointStatus(status), reason)


# seconds since mtime, settle_seconds -> settled?
SETTLED = [(0.0, 5, False), (4.999, 5, False), (5.0, 5, True), (9.0, 5, True), (0.0, 0, True)]


@pytest.mark.parametrize(("age", "settle", "expected"), SETTLED)
def test_is_settled_table(age: float, settle: float, expected: bool) -> None:
    assert is_settled(WRITTEN, WRITTEN.mtime_ns + round(age * S), settle) is expected


# previous, stat, now, closed -> what is known after
OBSERVATIONS = [
    ("first sight, open", None, WRITTEN, 10.0, False, Pending(WRITTEN, 10.0, False)),
    ("first sight, closed", None, WRITTEN, 10.0, True, Pending(WRITTEN, 10.0, True)),
    ("first sight, gone", None, None, 10.0, False, Pending(None, 10.0, False)),
    (
        "unchanged stat: the quiet keeps counting",
        Pending(WRITTEN, 10.0, False),
        WRITTEN,
        12.0,
        False,
        Pending(WRITTEN, 10.0, False),
    ),
    (
        "unchanged stat after a close: still closed",
        Pending(WRITTEN, 10.0, True),
        WRITTEN,
        12.0,
        False,
        Pending(WRITTEN, 10.0, True),
    ),
    (
        "grew: changing again, the close forgotten",
        Pending(WRITTEN, 10.0, True),
        GREW,
        12.0,
        False,
        Pending(GREW, 12.0, False),
    ),
    (
        "replaced by another inode of the same size and time",
        Pending(WRITTEN, 10.0, False),
        REPLACED,
        12.0,
        False,
        Pending(REPLACED, 12.0, False),
    ),
    (
        "vanished",
        Pending(WRITTEN, 10.0, False),
        None,
        12.0,
        False,
        Pending(None, 12.0, False),
    ),
    (
        "closed again, unchanged: the quiet restarts",
        Pending(WRITTEN, 10.0, True),
        WRITTEN,
        12.0,
        True,
        Pending(WRITTEN, 12.0, True),
    ),
    (
        "closed after growing",
        Pending(WRITTEN, 10.0, False),
        GREW,
        12.0,
        True,
        Pending(GREW, 12.0, True),
    ),
]


@pytest.mark.parametrize(
    ("previous", "stat", "now", "closed", "expected"),
    [row[1:] for row in OBSERVATIONS],
    ids=[row[0] for row in OBSERVATIONS],
)
def test_observe_table(
    previous: Pending | None, stat: FileStat | None, now: float, closed: bool, expected: Pending
) -> None:
    assert observe(previous, stat, now, closed) == expected


# closed, seconds of quiet, settle_seconds, min_age_seconds -> index it now?
READY = [
    (True, 0.0, 5, 0.2, False),  # just closed: a trainer may save twice in a row
    (True, 0.19, 5, 0.2, False),
    (True, 0.2, 5, 0.2, True),
    (True, 1.0, 5, 0.2, True),  # closed: min_age, not settle, is what it waits for
    (True, 0.0, 5, 0.0, True),
    (False, 0.2, 5, 0.2, False),  # never closed: only settle_seconds of no change will do
    (False, 4.99, 5, 0.2, False),
    (False, 5.0, 5, 0.2, True),
    (False, 0.0, 0, 0.2, True),
    (True, 0.5, 0, 1.0, False),  # a close waits min_age even when settling is off
]


@pytest.mark.parametrize(("closed", "quiet", "settle", "min_age", "expected"), READY)
def test_is_ready_table(
    closed: bool, quiet: float, settle: float, min_age: float, expected: bool
) -> None:
    pending = Pending(WRITTEN, 100.0, closed)
    assert is_ready(pending, 100.0 + quiet, settle, min_age) is expected


ages = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
seconds = st.floats(min_value=0, max_value=1e5, allow_nan=False)


@given(age=ages, settle=seconds)
def test_a_corrupt_looking_file_is_corrupt_only_once_settled(age: float, settle: float) -> None:
    now_ns = WRITTEN.mtime_ns + int(age * S)
    status, reason = verdict(CorruptCheckpoint("truncated"), WRITTEN, now_ns, settle)
    settled = is_settled(WRITTEN, now_ns, settle)
    assert status == (CheckpointStatus.CORRUPT if settled else CheckpointStatus.INCOMPLETE)
    assert reason.endswith("truncated") and (settled or "not settled yet" in reason)


@given(quiet=seconds, settle=seconds, min_age=seconds)
def test_a_close_makes_a_file_ready_once_min_age_passed_whatever_settle_says(
    quiet: float, settle: float, min_age: float
) -> None:
    closed = Pending(WRITTEN, 0.0, True)
    assert completion.is_ready(closed, quiet, settle, min_age) is (quiet >= min_age)
    open_ = Pending(WRITTEN, 0.0, False)
    assert completion.is_ready(open_, quiet, settle, min_age) is (quiet >= settle)


@given(
    stats=st.lists(st.sampled_from([WRITTEN, GREW, REPLACED, None]), min_size=1, max_size=12),
    closes=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_observe_remembers_the_last_change_and_whether_a_close_followed_it(
    stats: list[FileStat | None], closes: list[bool]
) -> None:
    """Folding any sequence of observations: the stat is the last one seen, `changed_at` the time
    of the last close or stat change, and `closed` says whether a close came at or after it."""
    pending: Pending | None = None
    last_change, closed_since = 0.0, False
    previous_stat: object = object()
    for t, (stat, closed) in enumerate(zip(stats, closes, strict=False)):
        pending = observe(pending, stat, float(t), closed)
        if closed or stat != previous_stat:
            last_change, closed_since = float(t), closed
        previous_stat = stat
        assert pending == Pending(stat, last_change, closed_since)
