"""core.versions: which files get their generations kept, where, and which versions retention
protects."""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.versions import (
    VERSIONS_DIR,
    Kept,
    is_fixed_name,
    is_rolling_pointer,
    original_parts,
    previous_generations,
    should_capture,
    split_suffix,
    trainer_file,
    version_parts,
)
from ckpt_daemon.formats.torch_zip import content_identity


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


# ---- issue 39: versions that cost only what they save --------------------------------------------


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("last.pt", "last"),
        ("latest.pth", "last"),
        ("last-v1.ckpt", "last"),  # Lightning's save_last when last.ckpt exists
        ("model_last.h5", "last"),
        ("best.pt", "best"),
        ("model_best.h5", "best"),
        ("best.keras", "best"),
        ("ckpt_epoch003.pt", None),
        ("latest.weights.h5", None),  # Keras BackupAndRestore's state, not a pointer
        ("blast.pt", None),
        ("epoch=3-step=8.ckpt", None),
    ],
)
def test_the_trainers_own_files_are_named_last_or_best(name: str, role: str | None) -> None:
    why = trainer_file(name)
    assert (why is None) == (role is None)
    if role is not None:
        assert f"trainer's {role} file ({name}" in str(why)
    assert is_rolling_pointer(name) == (role == "last")


def torch_like_zip(stem: str, serialization_id: str, weights: bytes = b"w" * 64) -> io.BytesIO:
    """What `torch.save` writes (formats/torch_zip.py): members under the file's stem, a random
    serialization id per save."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{stem}/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr(f"{stem}/byteorder", b"little")
        archive.writestr(f"{stem}/data/0", weights)
        archive.writestr(f"{stem}/version", b"3\n")
        archive.writestr(f"{stem}/.data/serialization_id", serialization_id.encode())
    raw.seek(0)
    return raw


def test_the_content_of_a_torch_zip_ignores_its_stem_and_serialization_id() -> None:
    epoch_file = torch_like_zip("ckpt_epoch007", "1111")
    last = torch_like_zip("last", "2222")
    assert epoch_file.getvalue() != last.getvalue()  # the bytes differ
    same = content_identity(epoch_file)
    assert same is not None and same == content_identity(last)
    assert content_identity(torch_like_zip("last", "3333", b"x" * 64)) != same
    assert content_identity(io.BytesIO(b"not a zip")) is None
