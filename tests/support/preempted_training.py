"""keras-team/keras#17012, for real: `ModelCheckpoint(save_best_only=True)` + `CSVLogger(append=True)`
+ `BackupAndRestore`, preempted after epoch 4 by an exception, resumed in a new process.

Usage (a child process; the test runs it twice)::

    python3 tests/support/preempted_training.py keras3|tfkeras RUN_DIR VERSIONS_DIR TRUTH_DIR first|resume

The learning rate is 0.02 for epochs 1-2 and -0.01 after (gradient ascent), so val_loss is best at
epoch 2 and worse at every epoch after it, every time: after the resume, ModelCheckpoint has
forgotten its best (the bug), so epoch 5 overwrites `best.keras` (or `best.h5`) with a worse model.
The truth, taken by a callback placed after ModelCheckpoint: each epoch's val_loss, whether the
best file was written (its sha256 changed), a copy of each generation and the model's
predictions on a fixed probe, in TRUTH_DIR (outside the root). After each save the callback waits
(bounded) until the service has kept that generation in VERSIONS_DIR, as a trainer's next epoch
would take at least that long on a real model; the test then judges what the service kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PREEMPT_AFTER = 4
EPOCHS = 6
CAPTURE_WAIT_S = 120.0


def main(framework: str, run_dir: Path, versions_dir: Path, truth_dir: Path, phase: str) -> int:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if framework == "tfkeras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as k
    else:
        import keras as k
    suffix = ".h5" if framework == "tfkeras" else ".keras"
    best = run_dir / f"best{suffix}"
    run_dir.mkdir(parents=True, exist_ok=True)
    truth_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.1 * rng.normal(size=(256, 1))).astype("float32")
    probe = np.random.default_rng(1).normal(size=(8, 8)).astype("float32")
    k.utils.set_random_seed(0)
    model = k.Sequential([k.Input((8,)), k.layers.Dense(16, activation="relu"), k.layers.Dense(1)])
    model.compile(optimizer=k.optimizers.SGD(0.02), loss="mse")

    class Truth(k.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            path = truth_dir / "truth.json"
            truth = json.loads(path.read_text()) if path.exists() else {"epochs": {}}
            digest = _sha256(best)
            written = digest is not None and digest not in {
                e["sha256"] for e in truth["epochs"].values() if e["written"]
            }
            number = epoch + 1
            truth["epochs"][str(number)] = {
                "val_loss": float(logs["val_loss"]),
                "written": written,
                "sha256": digest,
            }
            if written:
                shutil.copyfile(best, truth_dir / f"gen-epoch{number}{suffix}")
                np.save(truth_dir / f"pred-epoch{number}.npy", self.model.predict(probe, verbose=0))
                truth["epochs"][str(number)]["kept_after_s"] = _wait_kept(versions_dir, digest)
            path.write_text(json.dumps(truth, indent=1))

    class Preempt(k.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if phase == "first" and epoch + 1 == PREEMPT_AFTER:
                raise RuntimeError(f"preempted after epoch {PREEMPT_AFTER}")

    callbacks = [
        k.callbacks.LearningRateScheduler(lambda e, lr: 0.02 if e < 2 else -0.01),
        k.callbacks.ModelCheckpoint(str(best), monitor="val_loss", save_best_only=True),
        k.callbacks.CSVLogger(str(run_dir / "training.log"), append=True),
        k.callbacks.BackupAndRestore(str(run_dir / "backup")),
        Truth(),
        Preempt(),
    ]
    np.save(truth_dir / "probe.npy", probe)
    try:
        model.fit(
            x[:192],
            y[:192],
            validation_data=(x[192:], y[192:]),
            epochs=EPOCHS,
            batch_size=32,
            verbose=0,
            callbacks=callbacks,
        )
    except RuntimeError as exc:
        print(f"stopped: {exc}")
        return 3
    print("finished")
    return 0


def _sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _wait_kept(versions_dir: Path, digest: str | None) -> float | None:
    """Seconds until a kept version in `versions_dir` holds these bytes (None: never)."""
    started = time.monotonic()
    while time.monotonic() - started < CAPTURE_WAIT_S:
        for kept in versions_dir.glob("best.v*") if versions_dir.is_dir() else []:
            if _sha256(kept) == digest:
                return round(time.monotonic() - started, 3)
        time.sleep(0.1)
    return None


if __name__ == "__main__":
    framework, run_dir, versions_dir, truth_dir, phase = sys.argv[1:6]
    sys.exit(main(framework, Path(run_dir), Path(versions_dir), Path(truth_dir), phase))
