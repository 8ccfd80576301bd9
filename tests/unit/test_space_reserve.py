"""core.space_reserve: the reserve, whether a capture fits, and the order in which the service
gives up its own bytes below it (issue 20, item 2); `versions.reserve` in the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.core.disk_guard import MinFree
from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.core.space_reserve import (
    DEFAULT_BUDGET,
    DEFAULT_RESERVE,
    Ours,
    budget_bytes,
    budget_refusal,
    capture_refusal,
    plan,
    reserve_bytes,
)
from ckpt_daemon.settings import config

MB = 1_000_000


def test_the_reserve_is_at_least_the_biggest_checkpoint() -> None:
    assert reserve_bytes(MinFree(percent=5), 48 * MB, 10 * MB) == 10 * MB
    assert reserve_bytes(MinFree(percent=5), 1000 * MB, 10 * MB) == 50 * MB
    assert reserve_bytes(MinFree(bytes=3 * MB), 48 * MB, 0) == 3 * MB


def test_a_capture_needs_its_size_plus_the_reserve() -> None:
    # The filesystem: 48 MB, a 10 MB best.h5. Two copies fit, the third does not.
    assert capture_refusal(38 * MB, 10 * MB, 10 * MB) is None
    assert capture_refusal(28 * MB, 10 * MB, 10 * MB) is None
    why = capture_refusal(18 * MB, 10 * MB, 10 * MB)
    assert why is not None
    assert why.startswith("free 18.0 MB < the copy 10.0 MB + reserve 10.0 MB")


def _trashed(i: int, at: str, version: bool, size: int = MB) -> Ours:
    return Ours(i, f"/r/{'.ckpt-versions/' if version else ''}f{i}", size, at, version=version)


def test_our_bytes_go_in_the_documented_order() -> None:
    trashed = [
        _trashed(1, "2026-01-03", version=False),
        _trashed(2, "2026-01-02", version=True),
        _trashed(3, "2026-01-01", version=True),
        _trashed(4, "2026-01-01", version=False),
    ]
    olds = [
        Ours(10, "/r/.ckpt-versions/a.v1.h5", MB, "2026-01-01", version=True, best=True),
        Ours(11, "/r/.ckpt-versions/a.v2.h5", MB, "2026-01-02", version=True),
    ]
    got = plan(0, 100 * MB, trashed, olds)
    assert [(s.which, s.action, s.id) for s in got.steps] == [
        ("version_trash", "purge", 3),  # versions in the trash, oldest trashed first
        ("version_trash", "purge", 2),
        ("old_version", "trash", 11),  # old versions, oldest first, the best one last
        ("old_version", "trash", 10),
        ("trash", "purge", 4),  # then the rest of the trash, oldest trashed first
        ("trash", "purge", 1),
    ]
    assert not got.enough
    assert "deleting checkpoints needs min_free" in got.explain()
    assert all(s.reason.startswith("low free space (free ") for s in got.steps)
    assert "the best version of its file" in got.steps[3].reason


def test_the_plan_stops_once_back_above_the_reserve() -> None:
    trashed = [_trashed(1, "2026-01-01", version=True), _trashed(2, "2026-01-02", version=True)]
    got = plan(int(0.5 * MB), MB, trashed, [])
    assert [s.id for s in got.steps] == [1]
    assert got.enough and got.free_after == int(1.5 * MB)
    room = plan(
        0, 10 * MB, trashed, [Ours(9, "/v", MB, "x", version=True)], only=("version_trash",)
    )
    assert [s.id for s in room.steps] == [1, 2]


def test_versions_reserve_is_read_and_checked() -> None:
    base = "roots: [{path: /a}]\n"
    assert config.parse(base, base=Path("/srv"), source="t").versions.reserve == DEFAULT_RESERVE
    got = config.parse(
        base + "versions: {reserve: 2GB}\n", base=Path("/srv"), source="t"
    ).versions.reserve
    assert got == MinFree(bytes=2_000_000_000)
    got = config.parse(
        base + "versions: {reserve: 10%}\n", base=Path("/srv"), source="t"
    ).versions.reserve
    assert got == MinFree(percent=10.0)
    for bad, reason in (("lots", "size"), ("150%", "between 0.01% and 99%"), ("0", "1 MiB")):
        with pytest.raises(ConfigError) as info:
            config.parse(base + f"versions: {{reserve: '{bad}'}}\n", base=Path("/srv"), source="t")
        assert info.value.key == "versions.reserve"
        assert reason in info.value.reason, info.value.reason


def test_the_budget_of_our_copies_is_a_share_of_the_space_they_may_use() -> None:
    """Issue 39: all kept copies of a filesystem together stay within `versions.budget` (a
    share of its free space plus their own bytes, so it does not shrink as they fill it)."""
    assert budget_bytes(DEFAULT_BUDGET, 60 * MB, 20 * MB) == 20 * MB  # 25% of 80 MB
    assert budget_bytes(MinFree(bytes=5 * MB), 60 * MB, 20 * MB) == 5 * MB
    assert budget_refusal(10 * MB, 10 * MB, 20 * MB) is None
    why = budget_refusal(15 * MB, 10 * MB, 20 * MB)
    assert why is not None and "versions.budget 20.0 MB" in why


def test_versions_budget_is_read_and_checked() -> None:
    base = "roots: [{path: /a}]\n"
    assert config.parse(base, base=Path("/srv"), source="t").versions.budget == DEFAULT_BUDGET
    got = config.parse(base + "versions: {budget: 1GB}\n", base=Path("/srv"), source="t")
    assert got.versions.budget == MinFree(bytes=1_000_000_000)
    for bad, reason in (("lots", "size"), ("150%", "between 0.01% and 99%")):
        with pytest.raises(ConfigError) as info:
            config.parse(base + f"versions: {{budget: '{bad}'}}\n", base=Path("/srv"), source="t")
        assert info.value.key == "versions.budget"
        assert reason in info.value.reason, info.value.reason
