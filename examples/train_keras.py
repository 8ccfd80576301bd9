"""A small Keras training run that writes checkpoints the way real jobs do, for trying ckpt.

    python examples/train_keras.py runs/demo --epochs 5      # in a second terminal:
    ckpt list --run demo                                      # (with `ckpt serve` running)

It trains a tiny classifier on random data with ModelCheckpoint (one `.keras` file per epoch,
named with its epoch and val_loss, plus `last.keras` rewritten every epoch) and CSVLogger
(`training.log`), so `ckpt` can show epochs, metrics and the optimizer state of each file.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="the run folder (inside a root ckpt watches)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument(
        "--epoch-seconds",
        type=float,
        default=0.0,
        help="sleep this long after each epoch (to watch files arrive)",
    )
    args = parser.parse_args()

    import keras
    import numpy as np

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = rng.integers(0, 3, size=(256,))
    inputs = keras.Input((16,), name="features")
    hidden = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
    outputs = keras.layers.Dense(3, activation="softmax", name="head")(hidden)
    model = keras.Model(inputs, outputs, name="demo")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            os.path.join(args.out, "model.{epoch:02d}-{val_loss:.2f}.keras")
        ),
        keras.callbacks.ModelCheckpoint(os.path.join(args.out, "last.keras")),
        keras.callbacks.CSVLogger(os.path.join(args.out, "training.log")),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: time.sleep(args.epoch_seconds)),
    ]
    model.fit(
        x,
        y,
        validation_split=0.25,
        epochs=args.epochs,
        batch_size=32,
        verbose=0,
        callbacks=callbacks,
    )


if __name__ == "__main__":
    main()
