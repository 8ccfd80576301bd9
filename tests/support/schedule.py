"""The order in which test files go to the pytest-xdist workers: the longest first.

`--dist loadfile` hands each worker whole files (a module's fixtures are made once), in
collection order (`--no-loadscope-reorder`: xdist's default order is "most tests first", which
put the files of a few tests behind minutes of module fixtures, such as the version-space
campaign, last: one worker then ran them alone while the other idled). Longest first, the
short files fill in beside them at the end. conftest.py's `pytest_collection_modifyitems` sorts
with `longest_first`; a file not listed keeps its place after the listed ones (unit, then
integration, then e2e). tests/unit/test_schedule.py checks that every listed file exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Slowest first, by their time in a CI run (`pytest --durations`, module fixtures included):
# real training, TensorFlow load children, crash campaigns, a wheel built and installed.
SLOWEST_FIRST = (
    "e2e/test_version_space.py",
    "e2e/test_trust_hostile_models.py",
    "e2e/test_crash_campaign.py",
    "integration/test_compress.py",
    "e2e/test_trust_labels.py",
    "e2e/test_disk_pressure.py",
    "e2e/test_trainer_contract.py",
    "e2e/test_full_disk_guard.py",
    "e2e/test_version_crash_campaign.py",
    "e2e/test_packaging.py",
    "e2e/test_first_hour.py",
    "e2e/test_pipeline.py",
    "e2e/test_never_lose_the_best.py",
    "e2e/test_fleet.py",
    "e2e/test_deepspeed.py",  # real DeepSpeed fixtures (torchrun children) on a fresh cache
    "integration/test_split.py",
    "e2e/test_sharded_stacks.py",
    "integration/test_describe.py",
    "e2e/test_version_capture_crash.py",
    "e2e/test_it_just_knows.py",
    "integration/test_catalog.py",
    "e2e/test_postgres_catalog.py",
    "e2e/test_docs_site.py",
    "e2e/test_documented_commands.py",
    "e2e/test_pipeline_views.py",
    "e2e/test_guard_gives_up.py",
    "e2e/test_cluster_storage.py",  # ~20 s: a daemon under a preloaded no-rename library
    "e2e/test_peft_adapters.py",  # ~15 s: peft's save_pretrained in a child, once
)


def longest_first(items: list[pytest.Item]) -> None:
    """Sort `items` in place: the listed files first, slowest first; the order of the others,
    and of the tests within each file, as collected."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(item: pytest.Item) -> int:
        try:
            name = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)
