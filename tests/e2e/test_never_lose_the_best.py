"""Issue 11, keras-team/keras#17012 under a running daemon with the shipped default config.

Real Keras 3 (and tf-keras `.h5`) training with `ModelCheckpoint(save_best_only=True)`,
`CSVLogger(append=True)` and `BackupAndRestore`, preempted after epoch 4 and resumed in a new
process (tests/support/preempted_training.py): epoch 5 overwrites the best file with a worse
model, as Keras does. Afterwards the service must still give the real best: `ckpt best --metric
val_loss --run R` prints a file whose bytes are the epoch-2 generation and that predicts as the
epoch-2 model did; every generation has its epoch and val_loss; `ckpt latest --resumable` is the
best file itself (the newest training state). The config is the repository's config.yaml with
only its root and state folder pointed at the test's folders. The two frameworks' best files are
loaded in one child (five TensorFlow processes, not six)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import Daemon, Workspace, forked_python
from tests.support.training_runs import child_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "preempted_training.py"
TRAIN_TIMEOUT_S = 600
DERIVED_DEADLINE_S = 180
FRAMEWORKS = ["keras3", "tfkeras"]


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
    done = forked_python.run(argv, env=child_env(), text=True, timeout=TRAIN_TIMEOUT_S)
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


def predictions(wanted: list[tuple[str, Path, Path]]) -> dict[Path, np.ndarray]:
    """{path: load_model(path).predict(probe)} for each (framework, path, probe), all loaded in
    one new child (Keras 3 and tf-keras side by side: TensorFlow starts once for both)."""
    code = (
        "import os,sys,numpy as np\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL']='3'\n"
        "for framework, path, probe, out in zip(*[iter(sys.argv[1:])] * 4):\n"
        "    if framework=='tfkeras':\n"
        "        import tf_keras as k\n"
        "    else:\n        import keras as k\n"
        "    m=k.models.load_model(path)\n"
        "    np.save(out, m.predict(np.load(probe), verbose=0))\n"
    )
    argv, outs = [], {}
    for framework, path, probe in wanted:
        outs[path] = path.parent.parent / f"pred-{path.name}.npy"
        argv += [framework, str(path), str(probe), str(outs[path])]
    forked_python.run(
        [sys.executable, "-c", code, *argv], env=child_env(), check=True, timeout=TRAIN_TIMEOUT_S
    )
    return {path: np.load(out) for path, out in outs.items()}


@dataclass
class Preempted:
    """One framework's job under its own daemon, preempted and resumed, once the daemon has
    derived every generation of the best file (or the deadline passed: `doc` is None)."""

    ws: Workspace
    best: Path
    suffix: str
    truth_dir: Path
    truth: dict[str, Any]
    written: list[int]
    doc: dict[str, Any] | None
    predicted: dict[Path, np.ndarray] = field(default_factory=dict)  # loaded ahead


RUN = "job"


def preempted_job(framework: str, base: Path) -> Preempted:
    ws = shipped_config_workspace(base)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    truth_dir = base / "truth"  # the truth lives outside the root
    suffix = ".h5" if framework == "tfkeras" else ".keras"
    best = ws.root / RUN / f"best{suffix}"
    doc = None
    try:
        train(framework, ws, RUN, truth_dir, "first")
        train(framework, ws, RUN, truth_dir, "resume")
        truth = json.loads((truth_dir / "truth.json").read_text())["epochs"]
        written = sorted(int(e) for e, t in truth.items() if t["written"])
        deadline = time.monotonic() + DERIVED_DEADLINE_S
        while (doc := settled(ws, best, len(written))) is None and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        daemon.stop()
    return Preempted(ws, best, suffix, truth_dir, truth, written, doc)


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Preempted]:
    """Both frameworks' jobs, one after the other; then the files `ckpt best` names, both
    loaded in one child."""
    jobs = {f: preempted_job(f, tmp_path_factory.mktemp(f"best-{f}")) for f in FRAMEWORKS}
    wanted = []
    for framework, job in jobs.items():
        found = job.ws.run("best", "--metric", "val_loss", "--run", RUN, "--versions", check=False)
        if found.returncode == 0 and Path(found.stdout.strip()).is_file():
            wanted.append((framework, Path(found.stdout.strip()), job.truth_dir / "probe.npy"))
    predicted = predictions(wanted) if wanted else {}
    for job in jobs.values():
        job.predicted = predicted
    return jobs


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_best_survives_a_preempted_save_best_only_run(
    preempted: dict[str, Preempted], framework: str
) -> None:
    job = preempted[framework]
    ws, run, truth_dir, suffix, best = job.ws, RUN, job.truth_dir, job.suffix, job.best
    truth, written = job.truth, job.written
    assert written == [1, 2, 5], truth  # the bug: epoch 5 (worse) overwrote the best
    best_epoch = min(truth, key=lambda e: truth[e]["val_loss"])
    assert best_epoch == "2" and truth["5"]["val_loss"] > truth["2"]["val_loss"]
    assert all(truth[str(e)]["kept_after_s"] is not None for e in written), truth
    doc = job.doc
    assert doc is not None, ws.run("show", str(best), "--json").stdout  # derived in time

    # Every generation: its epoch and its val_loss, as training logged them.
    by_generation = {v["generation"]: v for v in doc["versions"]}
    assert [v["epoch"] for v in doc["versions"]] == written
    for v in doc["versions"]:
        assert v["metrics"]["val_loss"] == pytest.approx(truth[str(v["epoch"])]["val_loss"])
    assert by_generation[3]["current"] and doc["epoch"] == 5
    assert [g["epoch"] for g in doc["generations"]] == written

    # The real best, as a real file with the epoch-2 bytes, predicting as the epoch-2 model did;
    # a kept copy is an answer when asked (`--versions`, issue 39), and plain `best` says so.
    plain = ws.run("best", "--metric", "val_loss", "--run", run)
    assert plain.stdout.strip() == str(best)
    assert f"a kept copy is better: {by_generation[2]['path']}" in plain.stderr
    found = ws.run("best", "--metric", "val_loss", "--run", run, "--versions").stdout.strip()
    assert found == by_generation[2]["path"] and ".ckpt-versions" in found
    assert Path(found).read_bytes() == (truth_dir / f"gen-epoch2{suffix}").read_bytes()
    row = ws.json("best", "--metric", "val_loss", "--run", run, "--versions")
    assert (row["version_of"], row["epoch"]) == (str(best), 2)
    expected = np.load(truth_dir / "pred-epoch2.npy")
    if Path(found) not in job.predicted:  # not the file loaded ahead: load this one now
        job.predicted |= predictions([(framework, Path(found), truth_dir / "probe.npy")])
    assert np.array_equal(job.predicted[Path(found)], expected)

    # Resuming: the newest training state is the best file itself, not one of its versions.
    latest = ws.run("latest", "--run", run, "--resumable").stdout.strip()
    assert latest == str(best)
    listed = ws.json("list", "--run", run, "--versions")
    assert sorted(c["generation"] for c in listed if c["version_of"]) == [1, 2]
