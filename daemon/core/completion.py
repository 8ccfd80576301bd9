"""Is a checkpoint finished? Pure decisions from what was observed; the clock is an argument.

An open or parse error is "not ready" while the file is still changing, and only "corrupt" once
it has been left alone for `settle_seconds` (Keras writes in place, so a
reader can meet a half-written file that looks exactly like a truncated one).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CorruptCheckpoint, NotReady, ReadProblem, UnreadableCheckpoint
from .model import CheckpointStatus, FileStat


def is_settled(stat: FileStat, now_ns: int, settle_seconds: float) -> bool:
    return (now_ns - stat.mtime_ns) >= settle_seconds * 1e9


def verdict(
    problem: ReadProblem, stat: FileStat, now_ns: int, settle_seconds: float
) -> tuple[CheckpointStatus, str]:
    """The catalog status and one-line reason for a checkpoint its reader did not accept."""
    reason = str(problem)
    if isinstance(problem, UnreadableCheckpoint):
        return CheckpointStatus.UNREADABLE, reason
    if isinstance(problem, NotReady):
        return CheckpointStatus.INCOMPLETE, reason
    if isinstance(problem, CorruptCheckpoint) and not is_settled(stat, now_ns, settle_seconds):
        age = max(0.0, (now_ns - stat.mtime_ns) / 1e9)
        return CheckpointStatus.INCOMPLETE, f"changed {age:.1f}s ago, not settled yet: {reason}"
    return CheckpointStatus.CORRUPT, reason


@dataclass(frozen=True)
class Pending:
    """What the service has seen of a file it may soon index. Times are monotonic seconds."""

    stat: FileStat | None
    changed_at: float  # the last event or stat change
    closed: bool  # closed after writing, or renamed into place, since that change


def observe(previous: Pending | None, stat: FileStat | None, now: float, closed: bool) -> Pending:
    """Fold a new observation (an event, or a periodic stat) into what was known."""
    if previous is None:
        return Pending(stat, now, closed)
    if closed:
        return Pending(stat, now, True)
    if stat != previous.stat:
        return Pending(stat, now, False)
    return previous


def is_ready(pending: Pending, now: float, settle_seconds: float, min_age_seconds: float) -> bool:
    """Index it now? After a close or rename plus `min_age_seconds` of quiet (a trainer may save
    twice in a row), or, without such an event, after `settle_seconds` of no change at all."""
    quiet = now - pending.changed_at
    if pending.closed:
        return quiet >= min_age_seconds
    return quiet >= settle_seconds
