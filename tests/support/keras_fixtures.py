"""Generate real Keras / TensorFlow checkpoints plus a ground-truth manifest for the tests.

Usage: ``python3 tests/support/keras_fixtures.py OUT_DIR``

The parent process never imports TensorFlow. It runs two children, because Keras 3 and
tf-keras must not share a process:

* ``--keras3 OUT_DIR``  writes ``OUT_DIR/k3/...``  (Keras 3 formats, TF checkpoint, export)
* ``--tfkeras OUT_DIR`` writes ``OUT_DIR/tfk/...`` (tf-keras legacy HDF5 and SavedModel)

Each child merges its entries into ``OUT_DIR/manifest.json``. The entries are computed from
the live Python objects at save time, never by reading the files back. ``manifest.json`` is
removed again if a child fails, so its presence means a complete, successful generation.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

SEED = 1234
LR_K3 = 2.0**-9  # exactly representable in float32, so file and manifest agree exactly
LR_TFK = 2.0**-10
N_SAMPLES, N_FEATURES, N_CLASSES, BATCH = 64, 8, 3, 16  # validation_split=0.25 -> 3 steps/epoch
MANIFEST = "manifest.json"
OWNED = ("k3", "tfk", MANIFEST)  # the only paths under OUT_DIR that this script creates


# --------------------------------------------------------------------------- shared helpers


def update_manifest(out: Path, entries: dict[str, dict]) -> None:
    """Merge ``entries`` into OUT/manifest.json under a directory lock; replace atomically."""
    dir_fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        path = out / MANIFEST
        data = json.loads(path.read_text()) if path.exists() else {}
        data.update(entries)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=".manifest.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        os.close(dir_fd)


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(N_SAMPLES, N_FEATURES)).astype("float32")
    y = rng.integers(0, N_CLASSES, size=(N_SAMPLES,)).astype("int32")
    return x, y


def build_model(k, name: str, lr):
    """Input(8) -> Dense(16) -> BatchNorm -> ReLU -> Dense(3); ``k`` is keras or tf_keras."""
    inp = k.Input(shape=(N_FEATURES,), name="x")
    h = k.layers.Dense(16, name="fc1")(inp)
    h = k.layers.BatchNormalization(name="bn")(h)
    h = k.layers.Activation("relu", name="act")(h)
    out = k.layers.Dense(N_CLASSES, activation="softmax", name="head")(h)
    model = k.Model(inp, out, name=name)
    model.compile(
        optimizer=k.optimizers.Adam(learning_rate=lr),
        loss=k.losses.SparseCategoricalCrossentropy(),
        metrics=[k.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


def fit(model, epochs: int, callbacks=()):
    x, y = make_data()
    return model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=epochs,
        validation_split=0.25,
        verbose=0,
        callbacks=list(callbacks),
        shuffle=False,
    )


def scalar(v) -> float | int:
    return np.asarray(v).item()


def describe(model, version: str, fmt: str, kind: str, has_opt: bool, **extra) -> dict:
    """Ground truth for one saved file from the live model (``extra`` overrides fields)."""
    opt = model.optimizer if has_opt else None
    lr = None if opt is None else scalar(opt.learning_rate)
    entry = {
        "format": fmt,
        "kind": kind,
        "keras_version": version,
        "model_class": type(model).__name__ if kind == "full" else None,
        "model_name": model.name,
        "layer_names": [layer.name for layer in model.layers],
        "n_params": int(model.count_params()),
        "n_trainable_params": sum(int(np.prod(w.shape)) for w in model.trainable_weights),
        "has_optimizer_state": has_opt,
        "optimizer_class": None if opt is None else type(opt).__name__,
        "iterations": None if opt is None else int(scalar(opt.iterations)),
        "learning_rate": None if lr is None else float(lr),
        "epoch": None,
        "metrics": {},
    }
    entry.update(extra)
    return entry


def recorder_class(base):
    """A callback that records, per epoch, the logs, iterations and the resolved file name.

    Put it AFTER ModelCheckpoint in the callback list, so the checkpoint is already on disk.
    """

    class Recorder(base):
        def __init__(self, run_dir: Path, pattern: str):
            super().__init__()
            self.run_dir, self.pattern, self.rows = run_dir, pattern, []

        def on_epoch_end(self, epoch, logs=None):
            logs = {k: float(v) for k, v in (logs or {}).items()}
            path = self.run_dir / self.pattern.format(epoch=epoch + 1, **logs)
            assert path.exists(), f"ModelCheckpoint did not write {path}"
            iters = int(scalar(self.model.optimizer.iterations))
            self.rows.append({"path": path, "epoch": epoch + 1, "iterations": iters, "logs": logs})

    return Recorder


def checkpointed_run(k, model, run_dir: Path, pattern: str, epochs: int, **ckpt_kw) -> list:
    """fit() with ModelCheckpoint(run_dir/pattern) + Recorder + CSVLogger; returns the rows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = k.callbacks.ModelCheckpoint(str(run_dir / pattern), **ckpt_kw)
    rec = recorder_class(k.callbacks.Callback)(run_dir, pattern)
    csv = k.callbacks.CSVLogger(str(run_dir / "training.log"))
    history = fit(model, epochs, [ckpt, rec, csv]).history
    for i, row in enumerate(rec.rows):  # the recorded logs are exactly history.history
        assert row["logs"] == {key: float(vals[i]) for key, vals in history.items()}, row
    return rec.rows


def epoch_entries(out: Path, rows: list, describe_row) -> dict:
    return {
        row["path"].relative_to(out).as_posix(): describe_row(
            epoch=row["epoch"], iterations=row["iterations"], metrics=row["logs"]
        )
        for row in rows
    }


# --------------------------------------------------------------------------- Keras 3 child


def keras3_child(out: Path) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    k3 = out / "k3"
    entries: dict[str, dict] = {}

    def d(model, fmt, kind, has_opt, **kw):
        return describe(model, keras.__version__, fmt, kind, has_opt, **kw)

    # run_zip: .keras per epoch; the same model is exported afterwards (no .h5 save: bug B2).
    m = build_model(keras, "k3_zip", LR_K3)
    rows = checkpointed_run(keras, m, k3 / "run_zip", "e{epoch:02d}-vl{val_loss:.3f}.keras", 3)
    entries |= epoch_entries(out, rows, lambda **kw: d(m, "keras-v3-zip", "full", True, **kw))
    m.export(str(k3 / "export" / "sm"), verbose=False)
    entries["k3/export/sm"] = d(m, "savedmodel", "full", False)

    # run_weights: .weights.h5 per epoch (holds optimizer vars), then legacy .h5 of that model.
    m = build_model(keras, "k3_weights", LR_K3)
    pattern = "w.{epoch:02d}.weights.h5"
    rows = checkpointed_run(keras, m, k3 / "run_weights", pattern, 2, save_weights_only=True)
    entries |= epoch_entries(
        out, rows, lambda **kw: d(m, "keras-v3-weights-h5", "weights", True, **kw)
    )
    (k3 / "legacy").mkdir()
    m.save(str(k3 / "legacy" / "full.h5"))
    entries["k3/legacy/full.h5"] = d(m, "keras-legacy-h5", "full", True)
    m.save(str(k3 / "legacy" / "noopt.h5"), include_optimizer=False)
    entries["k3/legacy/noopt.h5"] = d(m, "keras-legacy-h5", "full", False)

    # schedule: LR is a LearningRateSchedule -> no learning_rate variable, learning_rate=None.
    sched = keras.optimizers.schedules.ExponentialDecay(LR_K3, decay_steps=10, decay_rate=0.5)
    m = build_model(keras, "k3_schedule", sched)
    fit(m, 1)
    (k3 / "schedule").mkdir()
    m.save(str(k3 / "schedule" / "lr_schedule.keras"))
    entries["k3/schedule/lr_schedule.keras"] = d(
        m, "keras-v3-zip", "full", True, learning_rate=None
    )

    # tfckpt: CheckpointManager, two saves with a fit in between.
    m = build_model(keras, "k3_tfckpt", LR_K3)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=m, optimizer=m.optimizer), str(k3 / "tfckpt"), max_to_keep=3
    )
    for _ in range(2):
        fit(m, 1)
        prefix = Path(manager.save())
        entries[prefix.relative_to(out).as_posix()] = d(m, "tf-checkpoint", "weights", True)

    update_manifest(out, entries)


# --------------------------------------------------------------------------- tf-keras child


def tfkeras_child(out: Path) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(SEED)
    tfk = out / "tfk"
    entries: dict[str, dict] = {}

    def d(model, fmt, kind, has_opt, **kw):
        return describe(model, tf_keras.__version__, fmt, kind, has_opt, **kw)

    m = build_model(tf_keras, "tfk_model", LR_TFK)
    pattern = "weights.{epoch:02d}-{val_loss:.2f}.hdf5"
    rows = checkpointed_run(tf_keras, m, tfk / "run_h5", pattern, 2)
    entries |= epoch_entries(out, rows, lambda **kw: d(m, "keras-legacy-h5", "full", True, **kw))

    m.save_weights(str(tfk / "weights_only.h5"))
    entries["tfk/weights_only.h5"] = d(m, "keras-legacy-weights-h5", "weights", False)

    m.save(str(tfk / "savedmodel"))  # no extension -> SavedModel with keras_metadata.pb
    entries["tfk/savedmodel"] = d(m, "savedmodel", "full", True)

    update_manifest(out, entries)


# --------------------------------------------------------------------------- parent


def run_children(out: Path) -> int:
    from tests.support import forked_python  # here: this file also runs as a script

    for name in OWNED:  # start clean, so reruns never mix old and new checkpoints
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    procs = [
        forked_python.popen([sys.executable, __file__, flag, str(out)], env=env)
        for flag in ("--keras3", "--tfkeras")
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        (out / MANIFEST).unlink(missing_ok=True)  # no manifest == no usable fixture set
        print(f"keras_fixtures: child exit codes {codes}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("--keras3", "--tfkeras"):
        child = keras3_child if argv[0] == "--keras3" else tfkeras_child
        child(Path(argv[1]).resolve())
        return 0
    if len(argv) == 1 and not argv[0].startswith("-"):
        return run_children(Path(argv[0]).resolve())
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
