"""The callbacks and the model of the training runs (tests/support/training_runs.py): they run
only in its child processes, where TensorFlow is imported; Keras 3 or tf-keras is passed in
(`base` is its `callbacks.Callback`, `k` the module), so one code serves both."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

SEED = 1234  # as keras_fixtures.py
CHECKPOINT_SUFFIXES = (".keras", ".h5", ".hdf5")


def floats(logs: dict[str, Any] | None) -> dict[str, float]:
    return {k: float(np.asarray(v).item()) for k, v in (logs or {}).items()}


def file_hashes(path: Path) -> dict[str, str]:
    data = path.read_bytes()
    out = {"sha256": hashlib.sha256(data).hexdigest()}
    try:
        import blake3  # the daemon's hash: lets the live test match generations by content

        out["blake3"] = "blake3:" + blake3.blake3(data).hexdigest()
    except ImportError:  # pragma: no cover - installed with the daemon
        pass
    return out


def truth_class(base: type) -> type:
    """A callback that records every change of the run's checkpoint files as a generation."""

    class Truth(base):
        def __init__(self, run_dir: Path, out: Path, sink: dict, per_batch: bool) -> None:
            super().__init__()
            self.run_dir, self.out, self.sink, self.per_batch = run_dir, out, sink, per_batch
            self.seen: dict[Path, str] = {}
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch + 1

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.per_batch:
                self.look(batch + 1, None, floats(logs))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.look(None, floats(logs), None)

        def look(self, batch: int | None, logs: Any, batch_logs: Any) -> None:
            for path in sorted(self.run_dir.iterdir()):
                if not path.name.endswith(CHECKPOINT_SUFFIXES) or not path.is_file():
                    continue
                hashes = file_hashes(path)
                if self.seen.get(path) == hashes["sha256"]:
                    continue
                self.seen[path] = hashes["sha256"]
                generation = {
                    "epoch": self.epoch,
                    "batch": batch,
                    "iterations": int(np.asarray(self.model.optimizer.iterations).item()),
                    "logs": logs,
                    "batch_logs": batch_logs,
                    "mtime_ns": path.stat().st_mtime_ns,
                    **hashes,
                }
                self.sink.setdefault(path.relative_to(self.out).as_posix(), []).append(generation)

    return Truth


def build(k: Any, name: str) -> Any:
    inp = k.Input(shape=(8,), name="x")
    h = k.layers.Dense(16, activation="relu", name="fc1")(inp)
    out = k.layers.Dense(3, activation="softmax", name="head")(h)
    model = k.Model(inp, out, name=name)
    model.compile(
        optimizer=k.optimizers.Adam(learning_rate=LR),
        loss="sparse_categorical_crossentropy",
        metrics=[k.metrics.SparseCategoricalAccuracy(name="accuracy")],
        run_eagerly=True,  # 3 steps x <= 9 epochs: tracing a graph per model costs more
    )
    return model


LR = 2.0**-5
KICK_EPOCHS = (2, 5)  # 0-based: the weights are shaken before epochs 3 and 6
KICK_SCALE = 0.3  # enough for val_loss to get worse there, small enough to recover after


def make_data() -> tuple[np.ndarray, np.ndarray]:
    """Learnable labels (a fixed linear rule), so val_loss falls, except after a kick."""
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(8, 3)), axis=1).astype("int32")
    return x, y


def step_decay(epoch: int, lr: float) -> float:
    return LR * 0.9**epoch


def kick_class(base: type) -> type:
    class Kick(base):
        """Noise added to every weight before the KICK_EPOCHS: val_loss is not monotonic, so
        save_best_only skips epochs (a deterministic stand-in for a noisy run)."""

        def __init__(self) -> None:
            super().__init__()
            self.rng = np.random.default_rng(7)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if epoch in KICK_EPOCHS:
                for w in self.model.trainable_weights:
                    noise = self.rng.normal(size=tuple(w.shape)).astype("float32")
                    w.assign(np.asarray(w) + noise * KICK_SCALE)

    return Kick


def tensorboard_writer() -> str:
    try:
        import tensorboard  # noqa: F401

        return "keras.callbacks.TensorBoard"
    except ImportError:
        return "tf.summary.write"


def tensorboard_class(base: type) -> type:
    class EpochScalars(base):
        """What Keras 3's TensorBoard callback writes per epoch, for machines without the
        `tensorboard` package (its `tf.summary.scalar` needs it): the same event files
        (logs/train, logs/validation), tags (`epoch_loss`, val_ prefix dropped in validation,
        `epoch_learning_rate`), 0-based epoch steps and scalars-plugin metadata, through
        TensorFlow's own `tf.summary.write`."""

        def __init__(self, log_dir: Path) -> None:
            import tensorflow as tf
            from tensorflow.core.framework import summary_pb2

            super().__init__()
            self.tf = tf
            self.metadata = summary_pb2.SummaryMetadata()
            self.metadata.plugin_data.plugin_name = "scalars"
            self.writers = {
                part: tf.summary.create_file_writer(str(log_dir / part))
                for part in ("train", "validation")
            }

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = dict(logs or {})
            if "learning_rate" not in logs:
                logs["learning_rate"] = float(np.asarray(self.model.optimizer.learning_rate))
            for part, writer in self.writers.items():
                val = part == "validation"
                items = {
                    k[4:] if val else k: v for k, v in logs.items() if k.startswith("val_") == val
                }
                with writer.as_default():
                    for name, value in items.items():
                        tensor = self.tf.cast(value, self.tf.float32)
                        self.tf.summary.write(f"epoch_{name}", tensor, epoch, self.metadata)
                writer.flush()

        def on_train_end(self, logs: Any = None) -> None:
            for writer in self.writers.values():
                writer.close()

    return EpochScalars
