"""core.versions: which files get their generations kept, where, and which versions retention
protects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.versions import (
    VERSIONS_DIR,
    Kept,
    is_fixed_name,
    original_parts,
    previous_generations,
    should_capture,
    split_suffix,
    version_parts,
)


@pytest.mark.parametrize(
    ("name", "stem", "suffix"),
    [
        ("best.keras", "best", ".keras"),
        ("best.weights.h5", "best", ".weights.h5"),
        ("model.h5", "model", ".h5"),
        ("w.hdf5", "w", ".hdf5"),
        ("odd.name.KERAS", "odd.name", ".KERAS"),
        (".keras", ".keras", ""),  # nothing before the suffix: not split
    ],
)
def test_the_suffix_keras_loads_by_is_kept_whole(name: str, stem: str, suffix: str) -> None:
    assert split_suffix(name) == (stem, suffix)


@pytest.mark.parametrize(
    ("name", "fixed"),
    [
        ("best.keras", True),
        ("model_last.h5", True),
        ("best.weights.h5", True),
        ("ckpt-05.keras", False),
        ("weights.03-0.52.hdf5", False),
        ("resnet50_best.keras", False),  # a number in the stem: kept from its 2nd generation
        ("latest.weights.h5", False),  # Keras BackupAndRestore's state
    ],
)
def test_fixed_names_are_the_ones_without_a_number(name: str, fixed: bool) -> None:
    assert is_fixed_name(name) is fixed


def test_capture_modes() -> None:
    assert should_capture("fixed_names", "best.keras", 1)
    assert not should_capture("fixed_names", "ckpt-05.keras", 1)
    assert should_capture("fixed_names", "ckpt-05.keras", 2)  # seen rewritten
    assert not should_capture("rewritten", "best.keras", 1)
    assert should_capture("rewritten", "best.keras", 2)
    assert not should_capture("off", "best.keras", 7)


def test_a_version_lives_under_the_versions_folder_with_its_generation_and_suffix() -> None:
    parts = version_parts(("exp", "seed1", "best.weights.h5"), 12)
    assert parts == (VERSIONS_DIR, "exp", "seed1", "best.v12.weights.h5")
    assert original_parts(parts) == (("exp", "seed1", "best.weights.h5"), 12)


@pytest.mark.parametrize(
    "parts",
    [
        ("exp", "best.v1.keras"),  # not under the versions folder
        (VERSIONS_DIR, "exp", "best.keras"),  # no generation
        (VERSIONS_DIR, "exp", "best.vx.keras"),
        (VERSIONS_DIR, "exp", "notes.txt"),
        (VERSIONS_DIR,),
    ],
)
def test_other_names_are_not_versions(parts: tuple[str, ...]) -> None:
    assert original_parts(parts) is None


names = st.text(st.characters(blacklist_characters="/\0"), min_size=1, max_size=20)


@given(
    st.lists(names, min_size=0, max_size=3),
    names,
    st.sampled_from([".keras", ".h5", ".weights.h5", ".hdf5", ".KERAS", ".H5"]),
    st.integers(1, 10**6),
)
def test_every_version_name_reads_back(
    folders: list[str], stem: str, suffix: str, generation: int
) -> None:
    original = (*folders, stem + suffix)
    assert original_parts(version_parts(original, generation)) == (original, generation)


def test_the_newest_kept_generations_of_each_file_are_protected() -> None:
    kept = [
        Kept(1, "/r/a/best.keras", 1),
        Kept(2, "/r/a/best.keras", 3),
        Kept(3, "/r/a/best.keras", 2),
        Kept(4, "/r/a/last.keras", 9),
    ]
    assert previous_generations(kept, 1) == {
        2: "previous generation of best.keras (v3)",
        4: "previous generation of last.keras (v9)",
    }
    assert set(previous_generations(kept, 2)) == {2, 3, 4}
