"""Issue 43's faults, small: `ckpt serve` running a stage on every checkpoint is SIGKILLed at
random moments, then left to finish: every job ends with exactly one recorded result and none
ran twice at once (`python3 bench/pipeline_kills.py`: 40 kills)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.support.forked_cli import ForkedCommands

BENCH = Path(__file__).resolve().parents[2] / "bench"
KILLS = 8


@pytest.mark.slow
def test_sigkills_of_the_daemon_mid_job_leave_one_result_per_job(tmp_path: Path) -> None:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    campaign = importlib.import_module("pipeline_kills")
    counts = campaign.run_campaign(
        tmp_path, kills=KILLS, checkpoints=6, seed=3, launcher=ForkedCommands()
    )
    assert counts["kills"] == KILLS
    assert counts["jobs"] == counts["done"] == counts["results"] == 6, counts
    assert counts["overlaps"] == 0, counts
    assert counts["never_ran_to_end"] == 0, counts
    assert counts["stages_killed_mid_run"] >= 2, counts  # the kills hit running stages
    assert counts["attempts"] >= 6 + counts["stages_killed_mid_run"], counts
