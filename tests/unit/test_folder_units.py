"""`usecases.folder_units.to_move`: a folder that holds other folders moves only its recorded
files, one that is the whole checkpoint moves as one; and the listing it looks at is closed
even when it stops at the first subfolder (a daemon keeps no descriptor of it open)."""

from __future__ import annotations

import warnings
from pathlib import Path

from ckpt_daemon.usecases.folder_units import to_move


def test_a_folder_with_subfolders_moves_its_files_and_closes_its_listing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name in ("checkpoint-1", "checkpoint-2", "checkpoint-3"):  # `any` stops at the first
        (out / name).mkdir(parents=True)
    (out / "trainer_state.json").write_text("{}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = to_move(out, ["out/trainer_state.json"])
    assert moved == [out / "trainer_state.json"]
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_folder_that_is_the_whole_checkpoint_moves_as_one(tmp_path: Path) -> None:
    step = tmp_path / "step-5"
    step.mkdir()
    (step / "model.safetensors").write_bytes(b"x")
    assert to_move(step, ["step-5/model.safetensors"]) == [step]
    assert to_move(tmp_path / "gone", ["gone/a"]) == [tmp_path / "gone"]  # the recheck says so
