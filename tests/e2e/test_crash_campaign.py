"""The crash campaign of bench/crash_campaign.py, small: SIGKILLs of split, compress, prune,
trash restore and pin-during-prune at random moments after each command's first catalog write
(where its acting begins), then the next command (`ckpt scan`) and a retry; nothing may be
corrupt, lost, wrongly deleted, orphaned in the trash, left leased, left as a temp or left
`planned`. The full campaign (300 kills) is `python3 bench/crash_campaign.py`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.forked_cli import ForkedCommands

BENCH = Path(__file__).resolve().parents[2] / "bench"
KILLS = 10  # six kinds, each killed at least once (top-up trials); 300 in the bench


def _campaign_module() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the bench scripts import their helpers by name
    return importlib.import_module("crash_campaign")


@pytest.mark.slow
def test_sigkills_leave_nothing_broken_after_the_next_command(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    campaign_module = _campaign_module()
    campaign = campaign_module.run_campaign(
        tmp_path / "crash",
        keras_checkpoints,
        kills=KILLS,
        seed=8,
        quick=True,
        anchor="write",
        log=lambda _line: None,
        launcher=ForkedCommands(),  # forked, not fresh interpreters (the bench's default)
    )
    assert campaign.kills >= KILLS
    killed_kinds = {t.plan.kind for t in campaign.trials if t.killed}
    assert killed_kinds == set(campaign_module.KINDS), f"kinds never killed: {killed_kinds}"
    counts = {inv: campaign.count(inv) for inv in campaign_module.INVARIANTS}
    findings = "\n".join(campaign.failures())
    assert not any(counts.values()), f"invariant counts {counts}; per trial:\n{findings}"
