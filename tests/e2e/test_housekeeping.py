"""A framework's own housekeeping is not an anomaly: real Keras `BackupAndRestore` runs (Keras 3
and tf-keras) and a real TF `CheckpointManager(max_to_keep=2)`, scanned while they train.

The trainers run in child processes that pause after each save until the test says go, so a
scan sees every intermediate state a user's daemon would see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.core.housekeeping import BACKUP_STATE, REMOVED_BACKUP, ROTATED
from tests.support import Workspace, forked_python

pytestmark = pytest.mark.slow

# Generous: two cores shared by several people, and each child imports TensorFlow.
STEP_TIMEOUT_S = 600.0

_PAUSE = """
import sys, time
from pathlib import Path

control = Path(sys.argv[2])


def pause(n):
    (control / f"ready-{n}").write_text("")
    deadline = time.time() + 900
    while not (control / f"go-{n}").exists():
        if time.time() > deadline:
            sys.exit(f"no go-{n}")
        time.sleep(0.05)
"""

# argv: keras | tf-keras, control folder, run folder, epochs.
BACKUP_TRAINER = (
    _PAUSE
    + """
import numpy as np

which, run, epochs = sys.argv[1], Path(sys.argv[3]), int(sys.argv[4])
if which == "tf-keras":
    import tf_keras as keras
    pattern = "epoch_{epoch}.h5"
else:
    import keras
    pattern = "epoch_{epoch}.weights.h5"
keras.utils.set_random_seed(1)


class Pause(keras.callbacks.Callback):  # last: the backup and the checkpoint are written
    def on_epoch_end(self, epoch, logs=None):
        pause(epoch + 1)


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
x, y = np.random.rand(32, 4), np.random.rand(32, 2)
callbacks = [
    keras.callbacks.BackupAndRestore(str(run / "backup")),
    keras.callbacks.ModelCheckpoint(str(run / "checkpoints" / pattern), save_weights_only=True),
    Pause(),
]
model.fit(x, y, epochs=epochs, batch_size=8, verbose=0, callbacks=callbacks)
"""
)

# argv: -, control folder, run folder, saves.
MANAGER_TRAINER = (
    _PAUSE
    + """
import tensorflow as tf

run, saves = Path(sys.argv[3]), int(sys.argv[4])
step = tf.Variable(0)
checkpoint = tf.train.Checkpoint(step=step, w=tf.Variable(tf.zeros([8, 8])))
manager = tf.train.CheckpointManager(checkpoint, str(run), max_to_keep=2)
for n in range(1, saves + 1):
    step.assign_add(1)
    manager.save()
    pause(n)
"""
)


class Trainer:
    """A trainer child paused after each save: `wait(n)` for save n, then `go(n)`."""

    def __init__(self, program: str, control: Path, run: Path, *args: str) -> None:
        control.mkdir(parents=True)
        self.control = control
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
        env.pop("TF_USE_LEGACY_KERAS", None)
        self.proc = forked_python.popen(  # from the TensorFlow zygote: no import of its own
            [sys.executable, "-c", program, args[0], str(control), str(run), *args[1:]],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._output: str | None = None

    def wait(self, n: int) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not (self.control / f"ready-{n}").exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"trainer exited {self.proc.returncode}: {self.output()}")
            assert time.monotonic() < deadline, f"trainer never reached save {n}"
            time.sleep(0.1)

    def go(self, n: int) -> None:
        (self.control / f"go-{n}").write_text("")

    def finish(self) -> None:
        code = self.proc.wait(timeout=STEP_TIMEOUT_S)
        assert code == 0, self.output()

    def output(self) -> str:
        """What it wrote, once it ended (read to the end once: its pipes are then closed)."""
        if self.proc.poll() is None:
            return "\n"
        if self._output is None:
            out, err = self.proc.communicate(timeout=60)
            self._output = f"{out}\n{err[-3000:]}"
        return self._output

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)
        self.output()  # its pipes closed


def scan(ws: Workspace) -> Any:
    return ws.json("scan")


def rows(ws: Workspace, *args: str) -> dict[str, dict[str, Any]]:
    """`ckpt list --all --json` (every row) by path relative to the root."""
    return {os.path.relpath(r["path"], ws.root): r for r in ws.json("list", "--all", *args)}


def relative(ws: Workspace, paths: list[str]) -> set[str]:
    return {os.path.relpath(p, ws.root) for p in paths}


@pytest.mark.parametrize("framework", ["keras", "tf-keras"])
def test_backup_and_restore_state_is_never_indexed_nor_missing(
    workspace: Workspace, framework: str
) -> None:
    ws = workspace
    run = ws.root / "exp"
    (run / "checkpoints").mkdir(parents=True)
    trainer = Trainer(BACKUP_TRAINER, ws.base / "control", run, framework, "2")
    try:
        for epoch in (1, 2):
            trainer.wait(epoch)
            report = scan(ws)
            backup_files = sorted(p for p in (run / "backup").rglob("*") if p.is_file())
            assert backup_files, "the trainer wrote no backup: nothing was tested"
            indexed = relative(ws, report["indexed"])
            assert indexed == {f"exp/checkpoints/epoch_{epoch}.{_suffix(framework)}"}
            skipped = {os.path.relpath(s["path"], ws.root): s["reason"] for s in report["skipped"]}
            state = {p: r for p, r in skipped.items() if p.startswith("exp/backup/")}
            # Keras 3: latest.weights.h5; tf-keras: chief/ckpt-<epoch> (a TF checkpoint)
            expected = (
                "exp/backup/latest.weights.h5"
                if framework == "keras"
                else f"exp/backup/chief/ckpt-{epoch}"
            )
            assert state == {expected: BACKUP_STATE}
            assert report["missing"] == [] and report["removed"] == [] and not report["failed"]
            assert not any(p.startswith("exp/backup") for p in rows(ws))
            trainer.go(epoch)
        trainer.finish()
    finally:
        trainer.stop()
    assert not any(p.is_file() for p in (run / "backup").rglob("*"))  # deleted by the trainer
    report = scan(ws)
    assert report["missing"] == [] and report["removed"] == [] and report["indexed"] == []
    assert rows(ws, "--status", "missing") == {}
    assert set(rows(ws)) == {f"exp/checkpoints/epoch_{e}.{_suffix(framework)}" for e in (1, 2)}


def _suffix(framework: str) -> str:
    return "weights.h5" if framework == "keras" else "h5"


def test_backup_files_of_an_old_catalog_are_removed_not_missing(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """Rows an older ckpt made for BackupAndRestore's files: once the folder shows what it is,
    they leave the run's checkpoints; when the trainer deletes the folder, nothing is missing."""
    ws = workspace
    weights = keras_checkpoints / "k3" / "run_weights" / "w.01.weights.h5"
    for name in ("a", "b"):
        (ws.root / name / "backup").mkdir(parents=True)
        shutil.copy2(weights, ws.root / name / "backup" / "latest.weights.h5")
    ws.run("scan")  # no metadata file yet: a checkpoint like any other, as an old scan saw it
    assert rows(ws)["a/backup/latest.weights.h5"]["status"] == "ok"
    # a: the trainer's metadata file shows up beside it, later the trainer removes the folder.
    (ws.root / "a" / "backup" / "training_metadata.json").write_text('{"epoch": 1, "batch": 0}')
    report = scan(ws)
    assert report["missing"] == []
    assert report["removed"] == [
        {"path": str(ws.root / "a/backup/latest.weights.h5"), "reason": BACKUP_STATE}
    ]
    shutil.rmtree(ws.root / "a" / "backup")
    # b: its whole backup folder is gone at the next scan (training ended meanwhile).
    shutil.rmtree(ws.root / "b" / "backup")
    report = scan(ws)
    assert report["missing"] == []
    assert relative(ws, [r["path"] for r in report["removed"]]) == {"b/backup/latest.weights.h5"}
    found = rows(ws)
    assert found["a/backup/latest.weights.h5"]["status"] == "removed"
    assert found["a/backup/latest.weights.h5"]["reason"] == BACKUP_STATE
    assert found["b/backup/latest.weights.h5"]["status"] == "removed"
    assert found["b/backup/latest.weights.h5"]["reason"] == REMOVED_BACKUP
    assert scan(ws)["removed"] == []  # recorded once
    assert ws.json("status")["checkpoints"] == 0  # removed is not on disk
    # Bytes at the path again, without the metadata: a checkpoint again, as usual.
    (ws.root / "b" / "backup").mkdir()
    shutil.copy2(weights, ws.root / "b" / "backup" / "latest.weights.h5")
    report = scan(ws)
    assert relative(ws, report["indexed"]) == {"b/backup/latest.weights.h5"}
    assert rows(ws)["b/backup/latest.weights.h5"]["status"] == "ok"


def test_checkpoint_manager_rotation_is_removed_by_trainer_not_missing(
    workspace: Workspace,
) -> None:
    ws = workspace
    run = ws.root / "tfrun"
    trainer = Trainer(MANAGER_TRAINER, ws.base / "control", run, "-", "4")
    removed_at: dict[str, int] = {}
    try:
        for n in range(1, 5):
            trainer.wait(n)
            report = scan(ws)
            assert relative(ws, report["indexed"]) == {f"tfrun/ckpt-{n}"}
            assert report["missing"] == [] and not report["failed"]
            for entry in report["removed"]:
                assert entry["reason"] == ROTATED
                removed_at[os.path.relpath(entry["path"], ws.root)] = n
            trainer.go(n)
        trainer.finish()
    finally:
        trainer.stop()
    # Save 3 rotated ckpt-1 out, save 4 ckpt-2: each seen by the scan right after.
    assert removed_at == {"tfrun/ckpt-1": 3, "tfrun/ckpt-2": 4}
    found = rows(ws)
    assert {p: r["status"] for p, r in found.items()} == {
        "tfrun/ckpt-1": "removed",
        "tfrun/ckpt-2": "removed",
        "tfrun/ckpt-3": "ok",
        "tfrun/ckpt-4": "ok",
    }
    assert found["tfrun/ckpt-1"]["reason"] == ROTATED
    assert rows(ws, "--status", "missing") == {}
    assert set(rows(ws, "--status", "removed")) == {"tfrun/ckpt-1", "tfrun/ckpt-2"}
    events = ws.json("log")
    removed = [e for e in events if e["action"] == "removed"]
    assert relative(ws, [e["path"] for e in removed]) == {"tfrun/ckpt-1", "tfrun/ckpt-2"}
    assert {e["reason"] for e in removed} == {ROTATED}
    assert not any(e["action"] == "missing" for e in events)
    # ckpt-3 deleted by hand: the state file still lists it, so it is missing.
    for member in run.glob("ckpt-3.*"):
        member.unlink()
    report = scan(ws)
    assert relative(ws, report["missing"]) == {"tfrun/ckpt-3"} and report["removed"] == []
    assert set(rows(ws, "--status", "missing")) == {"tfrun/ckpt-3"}
    assert rows(ws)["tfrun/ckpt-3"]["reason"] == "no longer on disk"


def test_an_experiment_covers_its_checkpoints_folder_in_best_list_and_prune(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    source = keras_checkpoints / "tfk" / "run_h5" / "weights.01-1.69.hdf5"
    layout = {
        "exp/checkpoints": ["weights.01-0.70.hdf5", "weights.02-0.50.hdf5", "weights.03-0.55.hdf5"],
        "exp/ckpt/fold1": ["weights.01-0.60.hdf5", "weights.02-0.65.hdf5"],
        "exp2": ["weights.01-0.10.hdf5", "weights.02-0.11.hdf5"],
    }
    for run, names in layout.items():
        (ws.root / run).mkdir(parents=True)
        for i, name in enumerate(names):
            shutil.copyfile(source, ws.root / run / name)
            os.utime(ws.root / run / name, ns=(10**18 + i * 10**9,) * 2)
    ws.run("scan")
    best = ws.run("best", "--metric", "val_loss", "--run", "exp").stdout.strip()
    assert best == str(ws.root / "exp/checkpoints/weights.02-0.50.hdf5")
    assert ws.json("best", "--metric", "val_loss", "--run", "exp2")["path"].endswith("0.10.hdf5")
    assert {r["run"] for r in ws.json("list", "--run", "exp")} == {
        "exp/checkpoints",
        "exp/ckpt/fold1",
    }
    assert {e["run"] for e in ws.json("log", "--run", "exp")} == {
        "exp/checkpoints",
        "exp/ckpt/fold1",
    }
    # prune --run exp: each run below exp planned on its own (its newest kept), exp2 untouched.
    plan = ws.json("prune", "--run", "exp", "--keep-last", "1", "--dry-run")
    trashed = {
        run["run"]: {
            os.path.basename(d["path"]) for d in run["decisions"] if d["action"] == "trash"
        }
        for run in plan["runs"]
    }
    assert trashed == {  # all but each run's newest
        "exp/checkpoints": {"weights.01-0.70.hdf5", "weights.02-0.50.hdf5"},
        "exp/ckpt/fold1": {"weights.01-0.60.hdf5"},
    }
    for run in plan["runs"]:
        assert {os.path.dirname(d["path"]) for d in run["decisions"]} == {str(ws.root / run["run"])}
