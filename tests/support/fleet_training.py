"""A real Keras 3 job for the fleet test: one `.keras` checkpoint per epoch with val_loss in its
name and a CSVLogger, a pause after each epoch, until STOP_FILE appears (or MAX_EPOCHS).

Usage (a child process)::

    python3 tests/support/fleet_training.py RUN_DIR STOP_FILE PAUSE_S
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

MAX_EPOCHS = 80


def main(run_dir: Path, stop_file: Path, pause_s: float) -> int:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support.training_callbacks import build, make_data

    keras.utils.set_random_seed(3)

    class PauseOrStop(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            time.sleep(pause_s)  # a real model's next epoch takes longer than this one's
            if stop_file.exists():
                self.model.stop_training = True

    run_dir.mkdir(parents=True, exist_ok=True)
    model = build(keras, "fleet")
    callbacks = [
        keras.callbacks.ModelCheckpoint(str(run_dir / "ckpt-{epoch:02d}-{val_loss:.4f}.keras")),
        keras.callbacks.CSVLogger(str(run_dir / "training.log")),
        PauseOrStop(),
    ]
    x, y = make_data()
    model.fit(
        x, y, batch_size=16, epochs=MAX_EPOCHS, validation_split=0.25, verbose=0,
        callbacks=callbacks, shuffle=False,
    )  # fmt: skip
    stop_file.with_name("training-done").write_text("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])))
