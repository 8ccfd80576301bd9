"""A trainer's save racing `ckpt compress`, aimed at the moments that matter instead of spread
over the command's whole run (most of which is Python starting up): right after the command
has checked the file against the catalog and is about to read it, and while it writes its
compressed copy (its temp file exists). Whatever the timing, afterwards the name holds exactly
the trainer's bytes, and the command either compressed before the save or refused with exit 3
and a one-line reason: never exit 1, never the old weights, never the save compressed under a
decision taken on other bytes.

The racer is a real process that watches from outside (the catalog's audit row, the folder's
listing), so the code under test runs unchanged. The outcome is checked on every round, so the
test cannot be flaky: a round where the racer came late proves less, it does not fail.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_trust_rewrites import TFK_EPOCHS, padded_checkpoint
from tests.support import Workspace

RACER = r"""
import os, shutil, sqlite3, sys, time
new, target, catalog, trigger, after, seen, stop = sys.argv[1:8]
folder = os.path.dirname(target)

def compress_began():  # its audit row is written after the checks, right before it reads
    try:
        db = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=1)
        try:
            n = db.execute("SELECT count(*) FROM events WHERE action = 'compress'").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return n > int(seen)

def writing():  # its compressed copy is being written beside the target
    return any(n.startswith(".ckpt-tmp-") for n in os.listdir(folder))

ready = compress_began if trigger == "planned" else writing
raced = False
while not os.path.exists(stop):
    if ready():
        raced = True
        break
    time.sleep(0.0005)
time.sleep(float(after))
shutil.copyfile(new, target)  # a save in place: truncate, then write
print("raced" if raced else "late", flush=True)
"""

ROUNDS = [("planned", a) for a in (0, 0.003, 0.01, 0.03)] + [
    ("temp", a) for a in (0, 0.002, 0.005, 0.01, 0.02, 0.05)
]


@pytest.mark.parametrize("trigger", ["planned", "temp"])
def test_a_save_aimed_at_compress_s_read_and_write_is_never_lost(
    workspace: Workspace, keras_checkpoints: Path, trigger: str
) -> None:
    target = workspace.root / "exp/weights.01-1.69.hdf5"
    old = padded_checkpoint(keras_checkpoints, workspace.base / "old.hdf5")
    new = padded_checkpoint(keras_checkpoints, workspace.base / "new.hdf5", epoch_of=TFK_EPOCHS[1])
    new_bytes = new.read_bytes()
    catalog = workspace.base / "state" / "catalog.db"
    stop = workspace.base / "compress-done"
    problems, outcomes = [], []
    for round_trigger, after in ROUNDS:
        if round_trigger != trigger:
            continue
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(old, target)
        workspace.run("scan", str(target))
        with sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=30) as db:
            seen = db.execute("SELECT count(*) FROM events WHERE action = 'compress'").fetchone()[0]
        stop.unlink(missing_ok=True)
        args = [new, target, catalog, trigger, after, seen, stop]
        racer = subprocess.Popen(
            [sys.executable, "-c", RACER, *map(str, args)], stdout=subprocess.PIPE, text=True
        )
        result = workspace.run("compress", str(target), check=False)
        stop.touch()
        raced = racer.communicate(timeout=60)[0].strip()
        assert racer.returncode == 0
        outcome = (after, raced, result.returncode, result.stderr.strip())
        outcomes.append(outcome)
        if result.returncode not in (0, 3) or result.stderr.count("\n") > 1:
            problems.append(("exit", *outcome))
        if target.read_bytes() != new_bytes:
            problems.append(("the save's bytes are not at the name", *outcome))
        leftovers = [p.name for p in target.parent.iterdir() if p != target]
        if leftovers:
            problems.append(("left", leftovers, *outcome))
    assert not problems, (problems, outcomes)
