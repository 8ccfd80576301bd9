"""Issue 11, keras-team/keras#17012 under a running daemon with the shipped default config.

Real Keras 3 (and tf-keras `.h5`) training with `ModelCheckpoint(save_best_only=True)`,
`CSVLogger(append=True)` and `BackupAndRestore`, preempted after epoch 4 and resumed in a new
process (tests/support/preempted_training.py): epoch 5 overwrites the best file with a worse
model, as Keras does. Afterwards the service must still give the real best: `ckpt best --metric
val_loss --run R` prints a file whose bytes are the epoch-2 generation and that predicts as the
epoch-2 model did; every generation has its epoch and val_loss; `ckpt latest --resumable` is the
best file itself (the newest training state). The config is the repository's config.yaml with
only its root and state folder pointed at the test's folders."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import Daemon, Workspace
from tests.support.training_runs import child_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "preempted_training.py"
TRAIN_TIMEOUT_S = 600
DERIVED_DEADLINE_S = 180


def shipped_config_workspace(base: Path) -> Workspace:
    ws = Workspace(base)
    text = (REPO / "config.yaml").read_text()
    assert "state_dir: ./.ckpt\n" in text and "  - path: ./runs\n" in text
    text = text.replace("state_dir: ./.ckpt\n", f"state_dir: {base / 'state'}\n")
    ws.config.write_text(text.replace("  - path: ./runs\n", f"  - path: {ws.root}\n"))
    return ws


def train(framework: str, ws: Workspace, run: str, truth: Path, phase: str) -> str:
    argv = [sys.executable, str(SCRIPT), framework, str(ws.root / run)]
    argv += [str(ws.root / ".ckpt-versions" / run), str(truth), phase]
    done = subprocess.run(
        argv, env=child_env(), capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S
    )
    expected = 3 if phase == "first" else 0
    assert done.returncode == expected, done.stdout + done.stderr
    return done.stdout


def settled(ws: Workspace, best: Path, generations: int) -> dict[str, Any] | None:
    """`ckpt show --json` of the best file once every generation has its epoch and val_loss."""
    shown = ws.run("show", str(best), "--json", check=False)
    if shown.returncode != 0:
        return None
    doc = json.loads(shown.stdout)
    versions = doc.get("versions") or []
    complete = len(versions) == generations and all(
        v["epoch"] is not None and "val_loss" in v["metrics"] for v in versions
    )
    return doc if complete and doc["epoch"] is not None else None


def predictions(framework: str, path: Path, probe: Path) -> np.ndarray:
    code = (
        "import os,sys,numpy as np\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL']='3'\n"
        "if sys.argv[1]=='tfkeras':\n"
        "    os.environ['TF_USE_LEGACY_KERAS']='1'; import tf_keras as k\n"
        "else:\n    import keras as k\n"
        "m=k.models.load_model(sys.argv[2])\n"
        "np.save(sys.argv[4], m.predict(np.load(sys.argv[3]), verbose=0))\n"
    )
    out = path.parent.parent / f"pred-{path.name}.npy"
    subprocess.run(
        [sys.executable, "-c", code, framework, str(path), str(probe), str(out)],
        env=child_env(),
        check=True,
        timeout=TRAIN_TIMEOUT_S,
    )
    return np.load(out)


@pytest.mark.parametrize("framework", ["keras3", "tfkeras"])
def test_the_best_survives_a_preempted_save_best_only_run(tmp_path: Path, framework: str) -> None:
    ws = shipped_config_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    run, truth_dir = "job", tmp_path / "truth"  # the truth lives outside the root
    suffix = ".h5" if framework == "tfkeras" else ".keras"
    best = ws.root / run / f"best{suffix}"
    try:
        train(framework, ws, run, truth_dir, "first")
        train(framework, ws, run, truth_dir, "resume")
        truth = json.loads((truth_dir / "truth.json").read_text())["epochs"]
        written = sorted(int(e) for e, t in truth.items() if t["written"])
        assert written == [1, 2, 5], truth  # the bug: epoch 5 (worse) overwrote the best
        best_epoch = min(truth, key=lambda e: truth[e]["val_loss"])
        assert best_epoch == "2" and truth["5"]["val_loss"] > truth["2"]["val_loss"]
        assert all(truth[str(e)]["kept_after_s"] is not None for e in written), truth
        deadline = time.monotonic() + DERIVED_DEADLINE_S
        while (doc := settled(ws, best, len(written))) is None:
            assert time.monotonic() < deadline, ws.run("show", str(best), "--json").stdout
            time.sleep(1)
    finally:
        daemon.stop()

    # Every generation: its epoch and its val_loss, as training logged them.
    by_generation = {v["generation"]: v for v in doc["versions"]}
    assert [v["epoch"] for v in doc["versions"]] == written
    for v in doc["versions"]:
        assert v["metrics"]["val_loss"] == pytest.approx(truth[str(v["epoch"])]["val_loss"])
    assert by_generation[3]["current"] and doc["epoch"] == 5
    assert [g["epoch"] for g in doc["generations"]] == written

    # The real best, as a real file with the epoch-2 bytes, predicting as the epoch-2 model did.
    found = ws.run("best", "--metric", "val_loss", "--run", run).stdout.strip()
    assert found == by_generation[2]["path"] and ".ckpt-versions" in found
    assert Path(found).read_bytes() == (truth_dir / f"gen-epoch2{suffix}").read_bytes()
    row = ws.json("best", "--metric", "val_loss", "--run", run)
    assert (row["version_of"], row["epoch"]) == (str(best), 2)
    expected = np.load(truth_dir / "pred-epoch2.npy")
    assert np.array_equal(predictions(framework, Path(found), truth_dir / "probe.npy"), expected)

    # Resuming: the newest training state is the best file itself, not one of its versions.
    latest = ws.run("latest", "--run", run, "--resumable").stdout.strip()
    assert latest == str(best)
    listed = ws.json("list", "--run", run, "--versions")
    assert sorted(c["generation"] for c in listed if c["version_of"]) == [1, 2]
