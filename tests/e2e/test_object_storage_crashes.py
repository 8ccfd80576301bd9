"""The crash campaign of bench/s3_crash_campaign.py, small: SIGKILLs of `ckpt tier` and `ckpt
fetch` (most once their transfer began) and the S3 server stopped mid-upload, against a real S3
API server on loopback. Nothing lost or corrupt, no local copy freed without a verified remote
copy, no multipart upload left after the next start. The full campaign (100+ kills) is `python3
bench/s3_crash_campaign.py`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.forked_cli import ForkedCommands

BENCH = Path(__file__).resolve().parents[2] / "bench"
KILLS = 4  # with one outage: about 3-5 min on a loaded 2-core machine


def _campaign_module() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("s3_crash_campaign")


@pytest.mark.slow
def test_kills_and_outages_during_tier_and_fetch_lose_nothing(tmp_path: Path) -> None:
    result = _campaign_module().run_campaign(
        tmp_path,
        kills=KILLS,
        seed=7,
        size_mb=24,
        files=2,
        outages=1,
        log=lambda _line: None,
        launcher=ForkedCommands(),  # forked, not fresh interpreters (the bench's default)
    )
    assert result.kills >= KILLS and result.tier_kills and result.fetch_kills
    assert result.outages == 1
    assert (result.lost, result.corrupt, result.freed_unverified, result.stale_uploads) == (
        0,
        0,
        0,
        0,
    ), result.problems
    assert not result.problems, result.problems
