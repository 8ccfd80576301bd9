"""formats.run_logs over real training logs: tiny Keras 3 and tf-keras fits in child processes
write TensorBoard event files and CSVLogger logs where users put them, with each epoch's `logs`
recorded as the ground truth; `read_run_logs` must give exactly those values."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ckpt_daemon.formats.run_logs import RunLogs, logs_signature, read_run_logs
from tests.support import forked_python, keras_csv

PATTERNS = ["training.log", "*.csv", "metrics.json"]

# One child per Keras flavour, several runs each (TensorFlow's start-up is the cost). Layout:
#   tb_only/run/            ModelCheckpoint here, TensorBoard(tb_only/run/logs), no CSV
#   odd/run/                CSVLogger("history.txt") only
#   exp/checkpoints/        ModelCheckpoint; CSVLogger(exp/training.log); TensorBoard(exp/logs)
#   exp2/checkpoints/       a sibling experiment, the same, other data
#   batch/run/              TensorBoard(update_freq=2)
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    flavour, out = sys.argv[1], sys.argv[2]
    if flavour == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    import numpy as np

    truth = {}

    class Record(keras.callbacks.Callback):
        def __init__(self, name):
            super().__init__()
            self.name = name
            truth[name] = {"epochs": {}, "start": time.time()}

        def on_epoch_end(self, epoch, logs=None):
            truth[self.name]["epochs"][epoch + 1] = {k: float(v) for k, v in logs.items()}
            truth[self.name]["end"] = time.time()

    def fit(name, seed, callbacks, epochs=3):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(64, 4)).astype("float32")
        y = (x.sum(axis=1) > 0).astype("float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy",
                      metrics=["accuracy"])
        model.fit(x, y, epochs=epochs, batch_size=16, validation_split=0.25, verbose=0,
                  callbacks=[Record(name), *callbacks])

    def ckpt(folder):
        os.makedirs(folder, exist_ok=True)
        return keras.callbacks.ModelCheckpoint(
            os.path.join(folder, "e{epoch:02d}.weights.h5"), save_weights_only=True)

    def at(*parts):
        path = os.path.join(out, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    tb = keras.callbacks.TensorBoard
    fit("tb_only", 1, [ckpt(at("tb_only/run")), tb(at("tb_only/run/logs"))])
    fit("odd", 2, [keras.callbacks.CSVLogger(at("odd/run/history.txt"))])
    for name, seed in (("exp", 3), ("exp2", 4)):
        fit(name, seed, [ckpt(at(name, "checkpoints")),
                         keras.callbacks.CSVLogger(at(name, "training.log")),
                         tb(at(name, "logs"))])
    fit("batch", 5, [tb(at("batch/run/logs"), update_freq=2)])
    with open(os.path.join(out, "truth.json"), "w") as fh:
        json.dump(truth, fh)
    """
)


FLAVOURS = ["keras3", "tf_keras"]


@pytest.fixture(scope="module")
def both_trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both flavours' children at once (each its own process, as ever): one TensorFlow
    start-up's wait, not two in a row."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    roots = {flavour: tmp_path_factory.mktemp(flavour) for flavour in FLAVOURS}
    procs = {
        flavour: forked_python.popen(
            [sys.executable, "-c", CHILD, flavour, str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flavour, root in roots.items()
    }
    try:
        for flavour, proc in procs.items():
            _out, err = proc.communicate(timeout=600)
            # Keras's TensorBoard callback needs the `tensorboard` package (TensorFlow 2.21 no
            # longer pulls it in): without it the child fails with TBNotInstalledError, and so
            # does this test.
            assert proc.returncode == 0, f"{flavour}: " + err[-3000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return roots


@pytest.fixture(scope="module", params=FLAVOURS)
def trained(request: pytest.FixtureRequest, both_trained: dict[str, Path]) -> Path:
    return both_trained[request.param]


def _truth(root: Path, name: str) -> dict[int, dict[str, float]]:
    runs = json.loads((root / "truth.json").read_text())
    return {int(k): v for k, v in runs[name]["epochs"].items()}


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _assert_values(logs: RunLogs, truth: dict[int, dict[str, float]], source: str) -> None:
    """Every epoch and metric of the fit's logs, float32-exact, from the expected source."""
    assert sorted(logs.by_epoch) == sorted(truth)
    for epoch, expected in truth.items():
        got = logs.by_epoch[epoch]
        for name, value in expected.items():
            assert got[name].value == _f32(value), (epoch, name)
            assert got[name].source.startswith(source), (epoch, name, got[name].source)


def test_tensorboard_alone(trained: Path) -> None:
    run = trained / "tb_only" / "run"
    logs = read_run_logs(run, trained, PATTERNS)
    truth = _truth(trained, "tb_only")
    _assert_values(logs, truth, "tensorboard:tb_only/run/logs/")
    assert logs.by_epoch[1]["loss"].source == "tensorboard:tb_only/run/logs/train"
    assert logs.by_epoch[1]["val_loss"].source == "tensorboard:tb_only/run/logs/validation"
    assert logs.epochs_logged == 3 and logs.notes == ()
    assert {f.kind for f in logs.files} == {"tensorboard"}
    times = json.loads((trained / "truth.json").read_text())["tb_only"]
    assert list(logs.epoch_times) == [1, 2, 3]
    walls = list(logs.epoch_times.values())
    assert walls == sorted(walls) and times["start"] <= walls[0] and walls[-1] <= times["end"] + 5


def test_csv_under_an_odd_name(trained: Path) -> None:
    logs = read_run_logs(trained / "odd" / "run", trained, PATTERNS)
    _assert_values(logs, _truth(trained, "odd"), "csv:odd/run/history.txt")
    assert [(f.label, f.kind, f.epochs) for f in logs.files] == [("odd/run/history.txt", "csv", 3)]


def test_csv_and_tensorboard_one_folder_above_and_no_sibling(trained: Path) -> None:
    run, sibling = trained / "exp" / "checkpoints", trained / "exp2" / "checkpoints"
    truth = _truth(trained, "exp")
    for others in ([sibling], []):  # the sibling's checkpoints keep it out even when unnamed
        logs = read_run_logs(run, trained, PATTERNS, others)
        _assert_values(logs, truth, "csv:exp/training.log")  # CSV beats TensorBoard
        sources = {m.source for row in logs.by_epoch.values() for m in row.values()}
        sources |= {m.source for row in logs.by_step.values() for m in row.values()}
        assert not any("exp2" in s for s in sources), sources
        assert not any("exp2" in f.label for f in logs.files)
        assert {f.kind for f in logs.files} == {"csv", "tensorboard"}
    sibling_logs = read_run_logs(sibling, trained, PATTERNS, [run])
    _assert_values(sibling_logs, _truth(trained, "exp2"), "csv:exp2/training.log")


def test_nearer_folder_wins(trained: Path, tmp_path: Path) -> None:
    run = trained / "exp" / "checkpoints"
    near = run / "metrics.csv"
    try:
        near.write_text(keras_csv([{"epoch": 1, "val_loss": 0.125}]), newline="")
        logs = read_run_logs(run, trained, PATTERNS)
        assert logs.by_epoch[2]["val_loss"].value == 0.125
        assert logs.by_epoch[2]["val_loss"].source == "csv:exp/checkpoints/metrics.csv"
        truth = _truth(trained, "exp")
        assert logs.by_epoch[2]["loss"].value == _f32(truth[2]["loss"])  # from the far file
        assert logs.by_epoch[1]["val_loss"].source == "csv:exp/training.log"
    finally:
        near.unlink()


def test_batch_level_tensorboard_is_keyed_by_step(trained: Path) -> None:
    logs = read_run_logs(trained / "batch" / "run", trained, PATTERNS)
    truth = _truth(trained, "batch")
    # Measured: with update_freq=N the callback's epoch values are recorded only when the
    # training step count at the epoch's end is a multiple of N (`record_if` gates them too);
    # here 3 steps an epoch, N=2: epoch 2 only. What is there must be exact.
    assert logs.by_epoch and set(logs.by_epoch) <= set(truth)
    _assert_values(logs, {e: truth[e] for e in logs.by_epoch}, "tensorboard:batch/run/logs/")
    assert logs.by_step, "update_freq=2 writes batch_* values keyed by step"
    assert all("loss" in row or "val_loss" in row for row in logs.by_step.values())


def test_signature_follows_the_files(trained: Path) -> None:
    run = trained / "odd" / "run"
    first = logs_signature(run, trained, PATTERNS)
    assert ("odd/run/history.txt", (run / "history.txt").stat().st_size) in {
        (label, size) for label, size, _ in first
    }
    assert logs_signature(run, trained, PATTERNS) == first
    extra = run / "notes.txt"
    extra.write_text("epoch,loss\n0,1.5\n")
    try:
        assert logs_signature(run, trained, PATTERNS) != first
        assert (
            read_run_logs(run, trained, PATTERNS)
            .by_epoch[1]["loss"]
            .source.startswith("csv:odd/run/history.txt")
        )
    finally:
        extra.unlink()
    assert logs_signature(run, trained, PATTERNS) == first
