"""Real training runs whose checkpoint names carry a step-like label before the epoch
(`ckpt.{epoch:02d}.keras`, `ckpt-{epoch:02d}.h5`, `iter_{epoch}.keras`), with a CSVLogger or the
real Keras TensorBoard callback alone, and a TF CheckpointManager saved once per epoch from a
callback beside the TensorBoard callback (its `ckpt-N` counts saves). The truth of each file is
what a callback saw at each epoch end (epoch, optimizer iterations, Keras's logs).

Usage (each framework in its own process: Keras 3 and tf-keras must not share one)::

    python3 tests/support/labelled_runs.py --keras3 OUT     # OUT/keras3/..., OUT/keras3-truth.json
    python3 tests/support/labelled_runs.py --tfkeras OUT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make `tests.support` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.training_callbacks import SEED, build, floats, make_data, truth_class

EPOCHS = 4
BATCH = 16  # 48 training samples: 3 steps per epoch
TIMEOUT_S = 900
FRAMEWORKS = ("keras3", "tfkeras")
# (run, ModelCheckpoint filepath or None for a CheckpointManager, metrics log)
KERAS3 = [
    ("ckpt_dot", "ckpt.{epoch:02d}.keras", "csv"),
    ("ckpt_dash", "ckpt-{epoch:02d}.keras", "csv"),
    ("iter_label", "iter_{epoch}.keras", "csv"),
    ("ckpt_tb", "ckpt.{epoch:02d}.keras", "tensorboard"),
    ("manager_tb", None, "tensorboard"),
]
TFKERAS = [
    ("ckpt_dot", "ckpt.{epoch:02d}.h5", "csv"),
    ("ckpt_dash", "ckpt-{epoch:02d}.h5", "csv"),
    ("ckpt_tb", "ckpt.{epoch:02d}.h5", "tensorboard"),
]


def manager_class(base: type, run_dir: Path, out: Path, sink: dict) -> Any:
    """Saves a tf.train.CheckpointManager checkpoint at each epoch end (after TensorBoard has
    written the epoch: it is placed after it) and records what it saved."""
    import tensorflow as tf

    class ManagerSave(base):
        def on_train_begin(self, logs: Any = None) -> None:
            checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)
            self.manager = tf.train.CheckpointManager(checkpoint, str(run_dir), max_to_keep=None)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            prefix = Path(self.manager.save())
            iterations = int(self.model.optimizer.iterations.numpy())
            generation = {"epoch": epoch + 1, "iterations": iterations, "logs": floats(logs)}
            sink[(prefix.parent / f"{prefix.name}.index").relative_to(out).as_posix()] = [
                generation
            ]

    return ManagerSave()


def framework_child(framework: str, out: Path) -> None:
    if framework == "keras3":
        import keras as k
    else:
        import tf_keras as k
    checkpoints: dict[str, dict] = {}
    for run, template, log in KERAS3 if framework == "keras3" else TFKERAS:
        run_dir = out / framework / run
        run_dir.mkdir(parents=True)
        sink: dict[str, list] = {}
        callbacks: list = []
        if template is not None:
            callbacks.append(k.callbacks.ModelCheckpoint(str(run_dir / template)))
            callbacks.append(truth_class(k.callbacks.Callback)(run_dir, out, sink, False))
        if log == "csv":
            callbacks.append(k.callbacks.CSVLogger(str(run_dir / "training.log")))
        else:
            callbacks.append(k.callbacks.TensorBoard(str(run_dir / "logs"), write_graph=False))
        if template is None:
            callbacks.append(manager_class(k.callbacks.Callback, run_dir, out, sink))
        x, y = make_data()
        k.utils.set_random_seed(SEED)
        model = build(k, run)
        model.fit(
            x, y, batch_size=BATCH, epochs=EPOCHS, validation_split=0.25, verbose=0,
            callbacks=callbacks, shuffle=False,
        )  # fmt: skip
        for rel, generations in sink.items():
            final = generations[-1]
            checkpoints[rel] = {
                "run": f"{framework}/{run}",
                "epoch": final["epoch"],
                "iterations": final["iterations"],
                "logs": final["logs"],
                "log": log,
            }
    tmp = out / f"{framework}-truth.json.tmp"
    tmp.write_text(json.dumps(checkpoints, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out / f"{framework}-truth.json")


def generate(out: Path) -> dict[str, dict]:
    """Both frameworks' runs, in parallel children, into `out`; the merged truth."""
    from tests.support import forked_python  # here: this file also runs as a script

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    procs = [
        forked_python.popen(
            [sys.executable, __file__, f"--{name}", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in FRAMEWORKS
    ]
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    for name, proc, text in zip(FRAMEWORKS, procs, outputs, strict=True):
        if proc.returncode:
            raise RuntimeError(f"--{name} exited {proc.returncode}:\n{text}")
    truth: dict[str, dict] = {}
    for name in FRAMEWORKS:
        truth |= json.loads((out / f"{name}-truth.json").read_text())
    return truth


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--keras3", "--tfkeras"):
        framework_child(sys.argv[1][2:], Path(sys.argv[2]).resolve())
        sys.exit(0)
    print(__doc__.split("\n\n")[2], file=sys.stderr)
    sys.exit(2)
