"""Is a folder save finished, in flight, or abandoned? One verdict for every framework.

An asynchronous save (Orbax, torch.distributed.checkpoint) writes for a while into a folder that
looks like a checkpoint long before it is one, and a writer killed mid-save leaves that state
behind for good (Orbax's `<step>.orbax-checkpoint-tmp` survives restarts; a DCP folder keeps its
partial data file). Readers outside the trainer see only the folder, so the verdict is made from
what the folder shows (gathered by `formats.folder_saves`), with the clock an argument:

- `complete`: no sign of an unfinished save, and no process writing in it;
- `incomplete`: a process holds one of its files open for writing, or a sign of an unfinished
  save (a tmp name, no `.metadata`, a data file shorter than `.metadata` says) and the folder
  changed within `abandoned_after`, or only an unconfirmed sign (no commit marker: older Orbax
  releases write none) while the folder is younger than `settle_seconds`;
- `abandoned`: a sign of an unfinished save, no writer, and nothing changed for
  `abandoned_after`: nobody will finish it (a dead or failed save).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .model import CheckpointStatus


class SaveState(enum.StrEnum):
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    ABANDONED = "abandoned"

    @property
    def status(self) -> CheckpointStatus:
        """The catalog status of a folder in this state."""
        return _STATUS[self]


_STATUS = {
    SaveState.COMPLETE: CheckpointStatus.OK,
    SaveState.INCOMPLETE: CheckpointStatus.INCOMPLETE,
    SaveState.ABANDONED: CheckpointStatus.ABANDONED,
}


@dataclass(frozen=True)
class SaveObservation:
    """What a folder showed at one look (no clock in it: `newest_mtime_ns` is the file system's)."""

    unfinished: tuple[str, ...] = ()  # signs of a save not finished: certain while they last
    unconfirmed: tuple[str, ...] = ()  # signs that count only while the folder is young
    writers: tuple[str, ...] = ()  # "pid 12 writes default/_METADATA": local processes
    newest_mtime_ns: int = 0  # the newest mtime of the folder and anything below it


@dataclass(frozen=True)
class SaveVerdict:
    state: SaveState
    reason: str | None  # None for a complete save

    @property
    def status(self) -> CheckpointStatus:
        return self.state.status


def judge(
    seen: SaveObservation, now_ns: int, abandoned_after_s: float, settle_s: float
) -> SaveVerdict:
    """The verdict on one folder save (see the module doc); the reason names the evidence."""
    age_s = max(0.0, (now_ns - seen.newest_mtime_ns) / 1e9)
    if seen.writers:
        shown = "; ".join(seen.writers[:3])
        return SaveVerdict(SaveState.INCOMPLETE, f"being written: {shown}")
    if seen.unfinished:
        signs = "; ".join(seen.unfinished[:3])
        if age_s >= abandoned_after_s:
            return SaveVerdict(
                SaveState.ABANDONED,
                f"save did not complete: {signs}; untouched for {_span(age_s)} with no writer",
            )
        reason = f"save in flight: {signs}; changed {_span(age_s)} ago"
        return SaveVerdict(SaveState.INCOMPLETE, reason)
    if seen.unconfirmed and age_s < settle_s:
        signs = "; ".join(seen.unconfirmed[:3])
        reason = f"not confirmed yet: {signs}; changed {_span(age_s)} ago"
        return SaveVerdict(SaveState.INCOMPLETE, reason)
    return SaveVerdict(SaveState.COMPLETE, None)


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
