"""The folder-save verdict as a table: every sign, every age, the writer rule."""

from __future__ import annotations

import pytest

from ckpt_daemon.core.model import CheckpointStatus
from ckpt_daemon.core.save_verdict import SaveObservation, SaveState, judge

S = 10**9
TMP = ("Orbax's in-flight name (.orbax-checkpoint-tmp)",)
NO_MARKER = ("no commit_success.txt",)
WRITER = ("pid 7 writes default/_METADATA",)


@pytest.mark.parametrize(
    ("seen", "age_s", "state", "words"),
    [
        (SaveObservation(), 0, SaveState.COMPLETE, None),
        (SaveObservation(), 10_000, SaveState.COMPLETE, None),
        (SaveObservation(unfinished=TMP), 5, SaveState.INCOMPLETE, "in flight"),
        (SaveObservation(unfinished=TMP), 3599, SaveState.INCOMPLETE, "in flight"),
        (SaveObservation(unfinished=TMP), 3600, SaveState.ABANDONED, "did not complete"),
        (SaveObservation(unfinished=TMP, writers=WRITER), 10**6, SaveState.INCOMPLETE, "pid 7"),
        (SaveObservation(writers=WRITER), 10**6, SaveState.INCOMPLETE, "being written"),
        (SaveObservation(unconfirmed=NO_MARKER), 1, SaveState.INCOMPLETE, "not confirmed"),
        (SaveObservation(unconfirmed=NO_MARKER), 6, SaveState.COMPLETE, None),
    ],
)
def test_verdicts(seen: SaveObservation, age_s: int, state: SaveState, words: str | None) -> None:
    now = 10**12
    seen = SaveObservation(seen.unfinished, seen.unconfirmed, seen.writers, now - age_s * S)
    verdict = judge(seen, now, abandoned_after_s=3600, settle_s=5)
    assert verdict.state is state
    if words is None:
        assert verdict.reason is None
    else:
        assert verdict.reason is not None and words in verdict.reason


def test_states_map_to_catalog_statuses() -> None:
    assert SaveState.COMPLETE.status is CheckpointStatus.OK
    assert SaveState.ABANDONED.status is CheckpointStatus.ABANDONED
