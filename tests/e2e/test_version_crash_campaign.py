"""The versions crash campaign of bench/version_crash.py, small: SIGKILLs of the daemon while it
keeps a generation (the trainer saving meanwhile), and of `ckpt restore --version` while the
trainer saves a generation nobody indexed; after the next start or command nothing may be lost,
corrupt, orphaned (a version file without its row, a trashed file without its record), left as
a temp or left `planned`. The full campaign (100 kills per act) is
`python3 bench/version_crash.py`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.forked_cli import ForkedCommands

BENCH = Path(__file__).resolve().parents[2] / "bench"
KILLS = 10  # per act; 100 in the bench


def _campaign_module() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the bench scripts import their helpers by name
    return importlib.import_module("version_crash")


@pytest.mark.slow
def test_sigkills_of_capture_and_restore_lose_nothing(tmp_path: Path) -> None:
    campaign = _campaign_module()
    acts = campaign.run_campaign(
        tmp_path / "versions",
        kills=KILLS,
        seed=20,
        acts=("capture", "restore"),
        floats=campaign.QUICK_FLOATS,
        log=lambda _line: None,
        launcher=ForkedCommands(),  # the daemon forked, not a fresh interpreter each start
    )
    assert [a.name for a in acts] == ["capture", "restore"]
    for act in acts:
        assert act.kills >= KILLS, act.name
        counts = {inv: act.counts[inv] for inv in campaign.INVARIANTS}
        assert not any(counts.values()), f"{act.name}: {counts}\n" + "\n".join(act.notes)
