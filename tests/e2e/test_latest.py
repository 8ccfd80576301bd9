"""`ckpt latest` on real Keras/TF runs: the right file (a TF CheckpointManager's prefix), exit 6
with its reason, the `--json` shape; docs/python-api.md's resume recipe really resumes (real
Keras and TF in a child process); bit rot under an unchanged stat is marked corrupt by `ckpt
verify` and never printed by `best` or `latest` again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_daemon.core.views import checkpoint_json
from tests.support import ZIP_RUN, Workspace, forked_python, zip_run

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIT_ROT = "bytes changed since indexed (hash differs, same size and mtime)"


def latest(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return ws.run("latest", *args, check=False)


@pytest.mark.parametrize(
    ("run", "resumable", "expected"),
    [
        ("k3/run_zip", True, "k3/run_zip/e03-vl1.643.keras"),  # 9 iterations, epoch 3
        ("k3/run_zip", False, "k3/run_zip/e03-vl1.643.keras"),
        ("k3/tfckpt", True, "k3/tfckpt/ckpt-2"),  # the prefix restore() takes
        ("tfk/run_h5", True, "tfk/run_h5/weights.02-1.68.hdf5"),  # tf-keras resumes its .h5
        ("k3/run_weights", False, "k3/run_weights/w.02.weights.h5"),
        ("k3", True, "k3/run_zip/e03-vl1.643.keras"),  # runs below k3: the most iterations
    ],
)
def test_latest_prints_the_newest_file(
    scanned: Workspace, run: str, resumable: bool, expected: str
) -> None:
    done = latest(scanned, "--run", run, *(["--resumable"] if resumable else []))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{scanned.root / expected}\n"
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ("k3/legacy", "Keras 3 drops its optimizer slots"),  # a Keras 3 legacy .h5 (B1)
        ("k3/run_weights", "needs a model you build and compile yourself"),
        ("k3/export", "a SavedModel is for serving"),
        ("nope", "no ok checkpoint in run 'nope'"),
    ],
)
def test_exit_6_says_why(scanned: Workspace, run: str, message: str) -> None:
    done = latest(scanned, "--run", run, "--resumable")
    assert (done.returncode, done.stdout) == (6, "")
    assert message in done.stderr


def test_without_run_several_runs_is_a_usage_error(scanned: Workspace) -> None:
    done = latest(scanned)
    assert (done.returncode, done.stdout) == (2, "")
    assert "several runs have ok checkpoints" in done.stderr and "--run" in done.stderr


def test_json_is_the_row_and_why_it_resumes(scanned: Workspace) -> None:
    doc = scanned.json("latest", "--run", "k3/tfckpt")
    row_fields = set(checkpoint_json(_any_row(scanned)))
    added = {"resumable", "resume_reason", "passed_over", "preferred_over", "location"}
    assert set(doc) == row_fields | added | {"remote_url"}
    assert doc["preferred_over"] is None  # ckpt-2 is no file its trainer rewrites
    assert (doc["location"], doc["remote_url"]) == ("local", None)  # no `remote:` configured
    assert doc["passed_over"] == []  # the newest ok checkpoint resumes: nothing passed over
    assert doc["path"] == str(scanned.root / "k3/tfckpt/ckpt-2")
    assert doc["format"] == "tf-checkpoint" and doc["resumable"] is True
    assert "restore(prefix)" in doc["resume_reason"]
    legacy = scanned.json("latest", "--run", "k3/legacy")  # without --resumable: said, not hidden
    assert legacy["resumable"] is False and "optimizer" in legacy["resume_reason"]


def _any_row(ws: Workspace) -> object:
    from ckpt_daemon.api import open_catalog

    with open_catalog(str(ws.config)) as cat:
        return cat.list(limit=1)[0]


RESUME = """
import json, sys
import numpy as np
import keras
import tensorflow as tf
sys.path.insert(0, sys.argv[4])
from tests.support.keras_fixtures import build_model, LR_K3

path, epoch, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
x = rng.normal(size=(24, 8)).astype("float32")
y = rng.integers(0, 3, size=(24,)).astype("int32")

model = keras.models.load_model(path)  # the docs' recipe (docs/python-api.md)
before = int(model.optimizer.iterations.numpy())
history = model.fit(x, y, batch_size=8, epochs=epoch + 1, initial_epoch=epoch, verbose=0)

m = build_model(keras, "k3_tfckpt", LR_K3)  # a TF custom loop: restore the printed prefix
m.optimizer.build(m.trainable_variables)
status = tf.train.Checkpoint(model=m, optimizer=m.optimizer).restore(prefix)
status.assert_existing_objects_matched()
restored = int(m.optimizer.iterations.numpy())
m.fit(x, y, batch_size=8, epochs=1, verbose=0)
print(json.dumps({"before": before, "after": int(model.optimizer.iterations.numpy()),
                  "epochs": history.epoch, "restored": restored,
                  "tf_after": int(m.optimizer.iterations.numpy())}))
"""


def test_the_docs_recipe_resumes_training(scanned: Workspace) -> None:
    """Keras 3: load_model(latest --resumable) then fit(initial_epoch=epoch) continues, the
    optimizer's iteration count carried over; TF: the printed prefix restores and trains on."""
    keras_path = latest(scanned, "--run", "k3/run_zip", "--resumable").stdout.strip()
    row = scanned.json("latest", "--run", "k3/run_zip", "--resumable")
    prefix = latest(scanned, "--run", "k3/tfckpt", "--resumable").stdout.strip()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    done = forked_python.run(
        [sys.executable, "-c", RESUME, keras_path, str(row["epoch"]), prefix, str(REPO)],
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["epoch"] == 3 and result["epochs"] == [3]  # the 4th epoch, numbered from 0
    assert result["before"] == 9 and result["after"] == 9 + 3  # 3 steps per epoch, carried on
    assert result["restored"] == 6 and result["tf_after"] == 9


def _flip_middle_byte(path: Path) -> None:
    """Bit rot: one byte in the middle changes; size, mtime and inode stay as indexed."""
    info = path.stat()
    with path.open("r+b") as f:
        f.seek(info.st_size // 2)
        byte = f.read(1)
        f.seek(info.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        info.st_size,
        info.st_mtime_ns,
        info.st_ino,
    )


def test_bit_rot_is_marked_corrupt_and_never_printed(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = zip_run(workspace, keras_checkpoints)
    run = ws.root / ZIP_RUN
    rotten, touched = run / "e03-vl1.643.keras", run / "e01-vl1.683.keras"
    assert latest(ws, "--run", ZIP_RUN, "--resumable").stdout.strip() == str(rotten)
    _flip_middle_byte(rotten)
    _flip_middle_byte(touched)  # other bytes and a new mtime: a new generation, the scan's
    info = touched.stat()
    os.utime(touched, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))

    done = ws.run("verify", "--json", check=False)
    assert done.returncode == 3, done.stderr
    verdicts = {v["path"]: v for v in json.loads(done.stdout)}
    assert not verdicts[str(rotten)]["ok"]
    assert verdicts[str(rotten)]["detail"].startswith(f"{BIT_ROT}: marked corrupt")
    assert "the next scan re-indexes it" in verdicts[str(touched)]["detail"]

    by_path = {r["path"]: r for r in ws.json("list")}
    assert (by_path[str(rotten)]["status"], by_path[str(rotten)]["reason"]) == ("corrupt", BIT_ROT)
    assert by_path[str(touched)]["status"] == "ok"  # reported, not marked
    events = [e for e in ws.json("log") if e["action"] == "mark-corrupt"]
    marks = [(e["path"], e["state"], e["reason"]) for e in events]
    assert marks == [(str(rotten), "done", BIT_ROT)]

    e02 = str(run / "e02-vl1.663.keras")
    best = ws.run("best", "--metric", "val_loss", "--run", ZIP_RUN)  # e03 had the best val_loss
    assert best.stdout == f"{e02}\n"
    newest = latest(ws, "--run", ZIP_RUN, "--resumable")
    assert newest.stdout == f"{e02}\n" and newest.returncode == 0
    scan = ws.run("scan", check=False)  # the rotten file's stat is unchanged: it stays corrupt
    assert scan.returncode == 3 and "corrupt" in scan.stderr
    assert ws.run("latest", "--run", ZIP_RUN).stdout != f"{rotten}\n"
    assert {r["path"]: r["status"] for r in ws.json("list")}[str(rotten)] == "corrupt"
