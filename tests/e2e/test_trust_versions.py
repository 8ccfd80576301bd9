"""Issue 20 (items 1, 3, 4), through `ckpt` as users run it, on real Keras 3 files and a real
SQLite catalog: a restore never replaces a save nobody indexed yet; every file our reconcile
moves into the trash has a trash record (listed, sized, purged); a legal long fixed name is
versioned, and a derived name that cannot fit is a clear refusal."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace

pytestmark = pytest.mark.slow
GENERATIONS = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]
NAME_MAX = 255
VERSIONS = ".ckpt-versions"


def save(best: Path, fixtures: Path, n: int) -> bytes:
    """Generation `n` of `best`, rewritten in place (the same inode, truncated) as Keras does;
    distinct bytes per generation (zip readers skip the tail)."""
    best.parent.mkdir(parents=True, exist_ok=True)
    data = (fixtures / "k3" / "run_zip" / GENERATIONS[(n - 1) % 3]).read_bytes() + bytes(n)
    with open(best, "r+b" if best.exists() else "wb") as out:
        out.truncate(0)
        out.write(data)
    return data


def show(ws: Workspace, path: Path) -> dict[str, Any]:
    return json.loads(ws.run("show", str(path), "--json").stdout)


def test_restore_never_replaces_a_save_nobody_indexed_yet(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """The trainer saved generation 3 after the last index (the daemon down): the restore of
    generation 1 indexes and keeps generation 3 first (a verified copy), then swaps."""
    ws = Workspace(tmp_path)
    best = ws.root / "job" / "best.keras"
    for n in (1, 2):
        save(best, keras_checkpoints, n)
        ws.run("scan")
    unindexed = save(best, keras_checkpoints, 3)  # nobody indexed this one
    done = ws.run("restore", str(best), "--version", "1", "--json", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    versions = ws.root / ".ckpt-versions" / "job"
    doc = show(ws, best)
    kept = {v["generation"]: Path(v["path"]) for v in doc["versions"]}
    assert sorted(kept) == [1, 2, 3], doc["versions"]
    assert kept[3].read_bytes() == unindexed, "the unindexed save was replaced, kept nowhere"
    assert best.read_bytes() == kept[1].read_bytes()
    assert not list(best.parent.glob(".ckpt-tmp-*")) and not list(versions.glob(".ckpt-tmp-*"))


def test_restore_refuses_while_a_save_is_under_way(tmp_path: Path, keras_checkpoints: Path) -> None:
    """The trainer is writing generation 3 (open for writing, half written): not indexable, so
    the restore is refused (exit 3) and the trainer's file is left as it writes it."""
    ws = Workspace(tmp_path)
    best = ws.root / "job" / "best.keras"
    for n in (1, 2):
        save(best, keras_checkpoints, n)
        ws.run("scan")
    third = (keras_checkpoints / "k3" / "run_zip" / GENERATIONS[2]).read_bytes()
    with open(best, "r+b") as trainer:
        trainer.truncate(0)
        trainer.write(third[: len(third) // 2])
        trainer.flush()
        done = ws.run("restore", str(best), "--version", "1", check=False)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "not restored" in done.stderr and "Traceback" not in done.stderr, done.stderr
        trainer.write(third[len(third) // 2 :])
    assert best.read_bytes() == third
    assert not list(best.parent.glob(".ckpt-tmp-*"))


def test_version_files_the_catalog_does_not_know_go_to_the_trash_with_a_record(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """Version files of an earlier catalog of the root, a crash's or planted: what the reconcile
    moves into the trash is listed by `trash list`, counted by `du`, purged by `trash purge`."""
    ws = Workspace(tmp_path)
    best = ws.root / "job" / "best.keras"
    save(best, keras_checkpoints, 1)
    ws.run("scan")
    versions = ws.root / ".ckpt-versions" / "job"
    # An earlier catalog's version of a generation this catalog never saw, and planted junk.
    foreign = versions / "best.v7.keras"
    foreign.write_bytes(save(tmp_path / "elsewhere" / "best.keras", keras_checkpoints, 2))
    junk = versions / "notes.txt"
    junk.write_text("not a version")
    # What an earlier catalog's reconcile moved into the trash without a record.
    trash = ws.root / ".ckpt-trash"
    earlier = trash / "20260101T000000Z-orphan-versions" / VERSIONS / "job" / "best.v9.keras"
    earlier.parent.mkdir(parents=True)
    shutil.copy2(foreign, earlier)
    sizes = foreign.stat().st_size + junk.stat().st_size + earlier.stat().st_size
    ws.run("scan")  # its reconcile judges what it finds in .ckpt-versions and in the trash
    assert not foreign.exists() and not junk.exists()
    in_trash = sorted(p for p in trash.rglob("*") if p.is_file())
    assert sorted(p.name for p in in_trash) == ["best.v7.keras", "best.v9.keras", "notes.txt"]
    listed = ws.json("trash", "list")
    paths = sorted(p for item in listed for p in item["paths"])
    assert paths == sorted(str(p) for p in in_trash), listed
    [root] = ws.json("du")["roots"]
    assert root["by_kind"]["trash"] == sizes and root["files"]["trash"] == 3, root
    ws.run("trash", "purge", "--older-than", "0s")
    assert not [p for p in trash.rglob("*") if p.is_file()], "purge left unrecorded bytes"
    assert best.exists() and len(list(versions.iterdir())) == 1  # generation 1's own version


def long_name(total: int, suffix: str = ".keras") -> str:
    """A fixed name (no digit) of `total` bytes: legal up to 255."""
    return "b" * (total - len(suffix)) + suffix


def test_a_legal_long_fixed_name_is_versioned_and_leaves_no_temp(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    best = ws.root / "job" / long_name(220)
    for n in (1, 2):
        save(best, keras_checkpoints, n)
        done = ws.run("scan")
        assert "version_lost" not in done.stderr, done.stderr
    doc = show(ws, best)
    kept = [v for v in doc["versions"] if v["path"]]
    assert [v["generation"] for v in kept] == [1, 2], doc["versions"]
    assert Path(kept[1]["path"]).read_bytes() == best.read_bytes()
    assert not list((ws.root / ".ckpt-versions").rglob(".ckpt-tmp-*"))
    # restore and split write temps of that name too: bounded, so they work
    ws.run("restore", str(best), "--version", "1")
    assert best.read_bytes() == Path(kept[0]["path"]).read_bytes()
    ws.run("scan")
    ws.run("split", str(best))
    assert (best.parent / (best.name[: -len(".keras")] + ".inference.keras")).is_file()
    assert not list(ws.root.rglob(".ckpt-tmp-*"))


def test_a_derived_name_that_cannot_fit_is_a_clear_refusal(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """A 255-byte name is legal; its version's and its artifact's names would not be: each is
    refused with the reason, nothing written, the file untouched; the temp of a compress of it
    (bounded) works."""
    ws = Workspace(tmp_path)
    best = ws.root / "job" / long_name(NAME_MAX)
    data = save(best, keras_checkpoints, 1)
    done = ws.run("scan")
    assert "version_lost" in done.stderr and "255" in done.stderr, done.stderr
    split = ws.run("split", str(best), check=False)
    assert split.returncode in (2, 3), split.stdout + split.stderr
    assert "255" in split.stderr and "Traceback" not in split.stderr, split.stderr
    assert best.read_bytes() == data
    assert not list(ws.root.rglob(".ckpt-tmp-*"))
    assert sorted(os.listdir(best.parent)) == [best.name]
    shutil.rmtree(ws.root / ".ckpt-versions", ignore_errors=True)
