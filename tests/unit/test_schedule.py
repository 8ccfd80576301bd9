"""The workers' schedule (tests/support/schedule.py) names files that exist, once each, and
sorts the listed files first, slowest first, keeping every other order as collected."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.schedule import SLOWEST_FIRST, TESTS, longest_first


def test_every_listed_file_exists_once() -> None:
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    missing = [name for name in SLOWEST_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"tests/support/schedule.py lists files that are gone: {missing}"


@dataclass
class Collected:  # what `longest_first` reads of a pytest item: its file
    path: Path
    name: str


def test_listed_files_go_first_slowest_first_the_rest_as_collected() -> None:
    slowest, second = TESTS / SLOWEST_FIRST[0], TESTS / SLOWEST_FIRST[1]
    unit = TESTS / "unit" / "test_config.py"
    items = [
        Collected(unit, "u1"),
        Collected(second, "s1"),
        Collected(unit, "u2"),
        Collected(slowest, "a1"),
        Collected(second, "s2"),
        Collected(slowest, "a2"),
    ]
    longest_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["a1", "a2", "s1", "s2", "u1", "u2"]
