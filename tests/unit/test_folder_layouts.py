"""Which folders a layout claims, from names alone (fs.folder_layouts), and what moves whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.fs import folder_layouts

T = frozenset
CASES = [
    # (folder name, files, subfolders) -> (claimed, whole)
    ("checkpoint-4", T({"config.json"}), T(), (True, True)),  # a Trainer save just begun
    ("checkpoint-4", T({"optimizer.pt", "model.safetensors"}), T(), (True, True)),
    ("tiny", T({"config.json", "model.safetensors"}), T(), (True, True)),  # save_pretrained
    ("tiny", T({"model.safetensors.index.json"}), T(), (True, True)),  # sharded, shards to come
    ("out", T({"config.json", "model.safetensors"}), T({"checkpoint-2", "runs"}), (True, False)),
    ("run", T({"model.safetensors"}), T(), (False, False)),  # a lone safetensors file is a file
    ("run", T({"config.json", "notes.txt"}), T(), (False, False)),
    ("checkpoint-x", T({"config.json"}), T(), (False, False)),
]


@pytest.mark.parametrize(("name", "files", "dirs", "expected"), CASES)
def test_claims(name: str, files: frozenset[str], dirs: frozenset[str], expected: tuple) -> None:
    found = folder_layouts.claim(Path("/nowhere") / name, files, dirs)
    assert (found is not None, bool(found and found.whole)) == expected
    if found is not None:
        assert found.family == "hf-folder"


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("/r/out/checkpoint-6/anything.bin", "/r/out/checkpoint-6"),
        ("/r/m/trainer_state.json", "/r/m"),
        ("/r/m/model-00002-of-00003.safetensors", "/r/m"),
        ("/r/m/pytorch_model.bin.index.json", "/r/m"),
        ("/r/m/model.safetensors", None),  # a file of its own unless its folder is claimed
        ("/r/m/e01.keras", None),
    ],
)
def test_announced_folder(path: str, folder: str | None) -> None:
    found = folder_layouts.announced_folder(Path(path))
    assert (str(found) if found else None) == folder
