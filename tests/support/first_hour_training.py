"""Issue 21, "the first hour": a new user's training script, for real, killed and resumed.

Keras 3 (or tf-keras) `fit()` for `EPOCHS` epochs with, as the user wrote them:
`ModelCheckpoint("ckpt/model-{epoch:03d}-{val_accuracy:.4f}.keras")`, a weights-only
`ModelCheckpoint("weights/w-{epoch:02d}.weights.h5")`, `best.h5` with `save_best_only`,
`CSVLogger("history.csv")` (its default `append=False`) and `BackupAndRestore("backup")` in the
experiment folder. `nested` puts the two numbered series in `ckpt/` and `weights/`; `flat` puts
everything in the experiment folder itself.

Usage (a child process; the test runs it twice, `first` then `resume`)::

    python3 tests/support/first_hour_training.py keras3|tfkeras TRUTH_DIR first|resume \
        nested=EXP_DIR [flat=EXP_DIR ...]

One `fit()` writes every layout named (one TensorFlow start-up, not one per layout): each its
own experiment folder with its own callbacks, all the `.keras` ModelCheckpoints placed before
any `best.h5` one, so each layout's `.keras` files are saved at the same point of the process
(before or after its first `best.h5`) as if it were trained alone.

`first` is killed by SIGKILL right after epoch `KILLED_AFTER` ended (its checkpoints, its CSV
row and BackupAndRestore's state written), as a preempted job is; `resume` is the same script
started again: BackupAndRestore resumes at the next epoch and CSVLogger rewrites `history.csv`
from there. TRUTH_DIR (outside the root) gets `truth.json`: each epoch's logs as Keras passed them
and the phase that ran it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np

EPOCHS = 10
KILLED_AFTER = 7
SEED = 1234


def layout_paths(layout: str, exp: Path) -> dict[str, Path]:
    ckpt = exp / "ckpt" if layout == "nested" else exp
    weights = exp / "weights" if layout == "nested" else exp
    return {
        "ckpt": ckpt / "model-{epoch:03d}-{val_accuracy:.4f}.keras",
        "weights": weights / "w-{epoch:02d}.weights.h5",
        "best": exp / "best.h5",
        "history": exp / "history.csv",
        "backup": exp / "backup",
    }


def backup_class(k: Any) -> type:
    """BackupAndRestore, one per layout. tf-keras's keeps the last one's state on the model too
    (`model._training_state`, which it deletes at the end of `fit()`): each instance puts its
    own back first, so the second one's end of training finds it (Keras 3's keep nothing there)."""

    class Backup(k.callbacks.BackupAndRestore):
        def on_train_end(self, logs: Any = None) -> None:
            if hasattr(self, "_training_state") and not hasattr(self.model, "_training_state"):
                self.model._training_state = self._training_state
            super().on_train_end(logs)

    return Backup


def main(framework: str, truth_dir: Path, phase: str, exps: dict[str, Path]) -> int:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if framework == "tfkeras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as k
    else:
        import keras as k
    layouts = [layout_paths(layout, exp) for layout, exp in exps.items()]
    for paths in layouts:
        for key in ("ckpt", "weights"):
            paths[key].parent.mkdir(parents=True, exist_ok=True)
    truth_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(96, 8)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(8, 3)), axis=1).astype("int32")
    k.utils.set_random_seed(SEED)
    model = k.Sequential(
        [k.Input((8,)), k.layers.Dense(16, activation="relu"), k.layers.Dense(3, "softmax")]
    )
    model.compile(
        optimizer=k.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )

    class Truth(k.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            path = truth_dir / "truth.json"
            truth = json.loads(path.read_text()) if path.exists() else {"epochs": {}}
            values = {key: float(np.asarray(v).item()) for key, v in (logs or {}).items()}
            truth["epochs"][str(epoch + 1)] = {"logs": values, "phase": phase}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(truth, indent=1))
            os.replace(tmp, path)

    class Kill(k.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if phase == "first" and epoch + 1 == KILLED_AFTER:
                os.kill(os.getpid(), signal.SIGKILL)

    callbacks = [k.callbacks.ModelCheckpoint(str(p["ckpt"])) for p in layouts]
    callbacks += [
        k.callbacks.ModelCheckpoint(str(p["weights"]), save_weights_only=True) for p in layouts
    ]
    callbacks += [
        k.callbacks.ModelCheckpoint(str(p["best"]), monitor="val_loss", save_best_only=True)
        for p in layouts
    ]
    callbacks += [k.callbacks.CSVLogger(str(p["history"])) for p in layouts]
    callbacks += [backup_class(k)(str(p["backup"])) for p in layouts]
    callbacks += [Truth(), Kill()]
    model.fit(
        x,
        y,
        validation_split=0.25,
        batch_size=24,
        epochs=EPOCHS,
        verbose=0,
        shuffle=False,
        callbacks=callbacks,
    )
    print("finished")
    return 0


if __name__ == "__main__":
    framework, truth_dir, phase = sys.argv[1:4]
    exps = {layout: Path(exp) for layout, exp in (a.split("=", 1) for a in sys.argv[4:])}
    assert exps and set(exps) <= {"nested", "flat"}, sys.argv[4:]
    sys.exit(main(framework, Path(truth_dir), phase, exps))
