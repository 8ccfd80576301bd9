"""Issue 8, the rewrite paths: split and compress keep what the checkpoint is (its mtime, its
place in the run), never lose a trainer's save, never replace a file they did not create, mark
their outputs as theirs, stay bounded on hostile files, and clean up after killed commands.

Everything runs through the CLI (`Workspace.run`, a subprocess) on real Keras checkpoints from
the session fixtures, or on small HDF5 files built here with h5py for the hostile cases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.conftest import Workspace

HOUR_NS = 3600 * 10**9
TFK_EPOCHS = ("weights.01-1.69.hdf5", "weights.02-1.68.hdf5")


def padded_checkpoint(keras_checkpoints: Path, target: Path, *, epoch_of: str = TFK_EPOCHS[0]) -> Path:
    """A real tf-keras full checkpoint plus 256 KiB of zeros at its root: compress shrinks it
    (the fixtures alone are too small to shrink), and Keras and our readers still read it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(keras_checkpoints / "tfk/run_h5" / epoch_of, target)
    with h5py.File(target, "a") as f:
        f.create_dataset("ckpt_test_padding", data=np.zeros(65536, np.float32))
    return target


def four_epochs(ws: Workspace, keras_checkpoints: Path) -> list[Path]:
    """`exp/weights.0{1..4}-*.hdf5`, written an hour apart (epoch 4 newest), scanned."""
    run = ws.root / "exp"
    files = []
    base = time.time_ns() - 10 * HOUR_NS
    for epoch in range(1, 5):
        path = padded_checkpoint(keras_checkpoints, run / f"weights.{epoch:02d}-1.{70 - epoch}.hdf5")
        os.utime(path, ns=(base + epoch * HOUR_NS, base + epoch * HOUR_NS))
        files.append(path)
    ws.run("scan")
    return files


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list")}


# ---- item 1: a rewrite keeps the mtime; retention orders by epoch/step, then mtime ----------


def test_compressing_an_old_epoch_does_not_make_it_the_newest(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    files = four_epochs(workspace, keras_checkpoints)
    before = {p: p.stat() for p in files}
    doc = workspace.json("compress", str(files[0]))
    assert doc["bytes_after"] < doc["bytes_before"] and "skipped" not in doc
    after = files[0].stat()
    assert after.st_ino != before[files[0]].st_ino  # really rewritten
    assert after.st_mtime_ns == before[files[0]].st_mtime_ns
    assert rows(workspace)[files[0].name]["mtime"] == workspace.json("show", str(files[0]))["mtime"]
    report = workspace.json("prune", "--keep-last", "1")
    kept = {
        Path(d["path"]).name: d["reasons"]
        for r in report["runs"]
        for d in r["decisions"]
        if d["action"] == "keep"
    }
    assert list(kept) == [files[3].name] and "newest" in kept[files[3].name], report
    assert files[3].exists() and not files[0].exists()
