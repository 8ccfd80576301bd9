"""Is a checkpoint finished? Pure decisions from what was observed; the clock is an argument.

An open or parse error is "not ready" while the file is still changing, and only "corrupt" once
it has been left alone for `settle_seconds` (keras-formats.md §5: Keras writes in place, so a
reader can meet a half-written file that looks exactly like a truncated one).
"""

from __future__ import annotations

from daemon.errors import CorruptCheckpoint, NotReady, ReadProblem, UnreadableCheckpoint
from daemon.model import CheckpointStatus, FileStat


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
