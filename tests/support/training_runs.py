"""Real training runs, named the way users name them, with the truth of every checkpoint.

Usage (each in its own process: Keras 3 and tf-keras must not share one)::

    python3 tests/support/training_runs.py --keras3 OUT    # OUT/keras3/..., OUT/keras3-truth.json
    python3 tests/support/training_runs.py --tfkeras OUT   # OUT/tfkeras/..., OUT/tfkeras-truth.json
    python3 tests/support/training_runs.py --live RUN_DIR TRUTH_JSON   # best/last, slowly

No configured templates anywhere: these runs are what "it just knows" must read. The truth is
taken from the live callbacks (a `Truth` callback placed AFTER the ModelCheckpoints sees, at
each epoch or batch end, which files changed, by sha256, and the exact `logs` Keras passed),
never by parsing names back. A file written k times (a fixed name) has k generations.

The tests import it for the scenario tables, `session_training_runs` (the cached set) and
`load_truth`, and the live test for `live_command`: TensorFlow is imported only in the children
(the callbacks they use are in `training_callbacks.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if not __package__:  # run as a script: make `tests.support` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.shared_fixtures import exclusive
from tests.support.training_callbacks import (
    LR,
    SEED,
    build,
    kick_class,
    make_data,
    step_decay,
    tensorboard_class,
    tensorboard_writer,
    truth_class,
)

VERSION = 3  # bump when a scenario changes: cached sets of another version are not reused
FRAMEWORKS = ("keras3", "tfkeras")
TRUTH = "{}-truth.json"
GENERATE_TIMEOUT_S = 900
BATCH = 16  # 64 samples, validation_split=0.25 -> 48 train samples -> 3 steps per epoch
STEPS_PER_EPOCH = 3

# Each scenario: run folder (relative to OUT/<framework>), ModelCheckpoint specs
# (template, kwargs), the metrics log, epochs, and options. `template` is what the user wrote.
Spec = dict[str, Any]
KERAS3: list[Spec] = [
    {"run": "dash_acc", "ckpts": [("model-{epoch:02d}-{val_accuracy:.3f}.keras", {})]},
    {
        "run": "keyvalue",
        "ckpts": [("ckpt_epoch={epoch}_val_loss={val_loss:.4f}.weights.h5", {"wo": True})],
        "epochs": 5,
    },
    {"run": "bare_epoch", "ckpts": [("{epoch:03d}.keras", {})], "epochs": 4},
    {
        "run": "best_gaps",
        "ckpts": [("best-{epoch:02d}-{val_loss:.2f}.keras", {"best": True})],
        "epochs": 9,
        "noisy_lr": True,
        "gaps": True,
    },
    {"run": "two_decimals", "ckpts": [("{epoch:02d}-{loss:.4f}-{val_loss:.4f}.keras", {})]},
    {
        "run": "exp/checkpoints",
        "ckpts": [("epoch_{epoch}.weights.h5", {"wo": True})],
        "log": "../training.log",
        "epochs": 5,
    },
    {"run": "tb_run", "ckpts": [("w.{epoch:02d}.keras", {})], "log": "tensorboard", "epochs": 4},
    {
        "run": "best_last",
        "ckpts": [("best.keras", {"best": True}), ("last.keras", {})],
        "noisy_lr": True,
        "fixed_evidence": "optimizer iterations",
    },
    {"run": "odd_csv", "ckpts": [("snap_{epoch:02d}.keras", {})], "log": "metrics_log.txt"},
    {"run": "acc_label", "ckpts": [("e{epoch}-acc{accuracy:.2f}.keras", {})], "epochs": 5},
    {"run": "sci", "ckpts": [("weights_{epoch:04d}_{val_loss:.3e}.keras", {})], "epochs": 4},
    {
        "run": "batch_freq",
        "ckpts": [("b.e{epoch:02d}-b{batch:03d}.weights.h5", {"wo": True, "save_freq": 2})],
        "epochs": 4,
    },
    {"run": "constant", "ckpts": [("run42-ep{epoch}.keras", {})], "epochs": 5},
    {"run": "metric_first", "ckpts": [("vl{val_loss:.3f}_ep{epoch:02d}.keras", {})]},
]
TFKERAS: list[Spec] = [
    {"run": "weights_hdf5", "ckpts": [("weights.{epoch:02d}-{val_loss:.2f}.hdf5", {})]},
    {
        "run": "best_last",
        "ckpts": [("best.h5", {"best": True}), ("last.h5", {})],
        "noisy_lr": True,
        "fixed_evidence": "optimizer iterations",
    },
    {"run": "dash_acc", "ckpts": [("model-{epoch:02d}-{accuracy:.2f}.h5", {})], "epochs": 5},
    # Weights only, no optimizer, nothing else in the run: no evidence of the epoch exists.
    {
        "run": "best_weights",
        "ckpts": [("best_weights.h5", {"best": True, "wo": True})],
        "noisy_lr": True,
        "fixed_evidence": None,
    },
]
CM_RUN = "cm_loop"  # Keras 3: tf.train.CheckpointManager in a GradientTape loop
CM_EPOCHS = 5


class SpecError(AssertionError):
    pass


def metrics_callbacks(k: Any, framework: str, spec: Spec, run_dir: Path) -> list:
    log = spec.get("log", "training.log")
    if log == "tensorboard" and tensorboard_writer() == "keras.callbacks.TensorBoard":
        return [k.callbacks.TensorBoard(str(run_dir / "logs"), write_graph=False)]
    if log == "tensorboard":
        return [tensorboard_class(k.callbacks.Callback)(run_dir / "logs")]
    return [k.callbacks.CSVLogger(str((run_dir / log).resolve()))]


def run_scenario(k: Any, framework: str, spec: Spec, out: Path) -> tuple[dict, dict]:
    run_dir = out / framework / spec["run"]
    run_dir.mkdir(parents=True)
    sink: dict[str, list] = {}
    # The scheduler first: it adds `learning_rate` to the logs the others see (as users order it).
    callbacks: list = []
    if spec.get("noisy_lr"):
        callbacks += [
            k.callbacks.LearningRateScheduler(step_decay),
            kick_class(k.callbacks.Callback)(),
        ]
    per_batch = False
    for template, opts in spec["ckpts"]:
        kwargs: dict[str, Any] = {"save_weights_only": bool(opts.get("wo"))}
        if opts.get("best"):
            kwargs |= {"save_best_only": True, "monitor": "val_loss", "mode": "min"}
        if "save_freq" in opts:
            kwargs["save_freq"] = opts["save_freq"]
            per_batch = True
        callbacks.append(k.callbacks.ModelCheckpoint(str(run_dir / template), **kwargs))
    callbacks.append(truth_class(k.callbacks.Callback)(run_dir, out, sink, per_batch))
    callbacks += metrics_callbacks(k, framework, spec, run_dir)
    x, y = make_data()
    k.utils.set_random_seed(SEED)  # each scenario as if alone: tuning one changes no other
    model = build(k, spec["run"].replace("/", "_"))
    epochs = spec.get("epochs", 6)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=epochs, validation_split=0.25, verbose=0,
        callbacks=callbacks, shuffle=False,
    ).history  # fmt: skip
    checkpoints = {}
    for rel, generations in sink.items():
        final = generations[-1]
        if final["logs"] is not None:  # the recorded logs are exactly Keras's history
            e = final["epoch"] - 1
            assert final["logs"] == {key: float(v[e]) for key, v in history.items()}, rel
        fixed = Path(rel).name in {t for t, _ in spec["ckpts"] if "{" not in t}
        checkpoints[rel] = describe(spec, rel, generations, fixed)
    check_scenario(spec, checkpoints, epochs)
    run = {
        "framework": framework,
        "templates": [t for t, _ in spec["ckpts"]],
        "metrics_log": spec.get("log", "training.log"),
        "tensorboard_writer": tensorboard_writer() if spec.get("log") == "tensorboard" else None,
        "epochs": epochs,
        "steps_per_epoch": STEPS_PER_EPOCH,
    }
    return {f"{framework}/{spec['run']}": run}, checkpoints


def describe(spec: Spec, rel: str, generations: list, fixed: bool) -> dict:
    final = generations[-1]
    expect_epoch: int | None = final["epoch"]
    if fixed and spec.get("fixed_evidence") is None:
        expect_epoch = None  # never a guess: nothing on disk tells which epoch this is
    return {
        "run": f"{Path(rel).parent.as_posix()}",
        "epoch": final["epoch"],
        "batch": final["batch"],
        "iterations": final["iterations"],
        "logs": final["logs"],
        "batch_logs": final["batch_logs"],
        "rewritten": fixed,
        "evidence": spec.get("fixed_evidence") if fixed else "name",
        "expect_epoch": expect_epoch,
        "generations": generations,
    }


def check_scenario(spec: Spec, checkpoints: dict, epochs: int) -> None:
    """The scenario shows what it claims to (gaps really happened, rewrites really rewrote)."""
    if not checkpoints:
        raise SpecError(f"{spec['run']}: no checkpoint written")
    if spec.get("gaps"):
        saved = sorted(c["epoch"] for c in checkpoints.values())
        if len(saved) >= epochs or saved == list(range(saved[0], saved[-1] + 1)):
            raise SpecError(f"{spec['run']}: no gap in the saved epochs {saved}")
    for rel, c in checkpoints.items():
        last = c["rewritten"] and rel.endswith(("last.keras", "last.h5"))
        if last and len(c["generations"]) != epochs:
            raise SpecError(f"{rel}: {len(c['generations'])} generations, not {epochs}")
        if c["rewritten"] and "best" in rel and len(c["generations"]) < 2:
            raise SpecError(f"{rel}: best was never rewritten")


# --------------------------------------------------------------------------- CheckpointManager


def checkpoint_manager_run(out: Path) -> tuple[dict, dict]:
    """A custom GradientTape loop; CheckpointManager.save() once per epoch; JSON-lines log."""
    import keras
    import tensorflow as tf

    run_dir = out / "keras3" / CM_RUN
    run_dir.mkdir(parents=True)
    x, y = make_data()
    xt, yt, xv, yv = x[:48], y[:48], x[48:], y[48:]
    model = build(keras, "cm_loop")
    optimizer = keras.optimizers.Adam(learning_rate=LR)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=optimizer), str(run_dir), max_to_keep=None
    )
    checkpoints: dict[str, dict] = {}
    with open(run_dir / "metrics.jsonl", "w") as log:
        for epoch in range(1, CM_EPOCHS + 1):
            losses = []
            for start in range(0, 48, BATCH):
                with tf.GradientTape() as tape:
                    loss = loss_fn(yt[start : start + BATCH], model(xt[start : start + BATCH]))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
                losses.append(float(loss))
            logs = {
                "loss": float(np.float32(np.mean(losses))),
                "val_loss": float(loss_fn(yv, model(xv))),
            }
            iterations = int(optimizer.iterations.numpy())
            prefix = Path(manager.save())
            record = {"epoch": epoch, "step": iterations, **logs}
            log.write(json.dumps(record) + "\n")
            log.flush()
            rel = prefix.relative_to(out).as_posix()
            generation = {"epoch": epoch, "batch": None, "iterations": iterations, "logs": logs}
            checkpoints[rel] = {
                "run": f"keras3/{CM_RUN}",
                "epoch": epoch,
                "batch": None,
                # The global step is the optimizer's count; `ckpt-N`'s N only counts saves.
                "step": iterations,
                "iterations": iterations,
                "logs": logs,
                "batch_logs": None,
                "rewritten": False,
                "evidence": "optimizer iterations",
                "expect_epoch": epoch,
                "generations": [generation],
            }
    run = {
        "framework": "keras3",
        "templates": ["ckpt-{step}"],
        "metrics_log": "metrics.jsonl",
        "epochs": CM_EPOCHS,
        "steps_per_epoch": STEPS_PER_EPOCH,
    }
    return {f"keras3/{CM_RUN}": run}, checkpoints


# --------------------------------------------------------------------------- children


def write_truth(out: Path, framework: str, runs: dict, checkpoints: dict, seconds: float) -> None:
    doc = {"version": VERSION, "seconds": seconds, "runs": runs, "checkpoints": checkpoints}
    tmp = out / (TRUTH.format(framework) + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out / TRUTH.format(framework))


def framework_child(framework: str, out: Path) -> None:
    started = time.monotonic()
    if framework == "keras3":
        import keras as k
    else:
        import tf_keras as k
    k.utils.set_random_seed(SEED)
    runs: dict = {}
    checkpoints: dict = {}
    for spec in KERAS3 if framework == "keras3" else TFKERAS:
        more_runs, more = run_scenario(k, framework, spec, out)
        runs |= more_runs
        checkpoints |= more
    if framework == "keras3":
        more_runs, more = checkpoint_manager_run(out)
        runs |= more_runs
        checkpoints |= more
    write_truth(out, framework, runs, checkpoints, time.monotonic() - started)


def live_child(run_dir: Path, truth_path: Path, sleep_s: float, epochs: int) -> None:
    """best.keras + last.keras rewritten each epoch, a CSVLogger, and a pause after each epoch
    (so a watching service indexes every generation before the next one is written)."""
    import keras

    keras.utils.set_random_seed(SEED)

    class Pause(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            time.sleep(sleep_s)

    run_dir.mkdir(parents=True, exist_ok=True)
    sink: dict[str, list] = {}
    model = build(keras, "live")
    best = {"save_best_only": True, "monitor": "val_loss", "mode": "min"}
    callbacks = [
        keras.callbacks.LearningRateScheduler(step_decay),
        kick_class(keras.callbacks.Callback)(),
        keras.callbacks.ModelCheckpoint(str(run_dir / "best.keras"), **best),
        keras.callbacks.ModelCheckpoint(str(run_dir / "last.keras")),
        truth_class(keras.callbacks.Callback)(run_dir, run_dir, sink, False),
        keras.callbacks.CSVLogger(str(run_dir / "training.log")),
        Pause(),
    ]
    x, y = make_data()
    model.fit(
        x, y, batch_size=BATCH, epochs=epochs, validation_split=0.25, verbose=0,
        callbacks=callbacks, shuffle=False,
    )  # fmt: skip
    tmp = truth_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sink, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, truth_path)


def child_env() -> dict[str, str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    return env


def live_command(run_dir: Path, truth_path: Path, sleep_s: float = 1.5, epochs: int = 6) -> list:
    """The argv of a live training child (for subprocess.Popen with `child_env()`)."""
    return [sys.executable, __file__, "--live", str(run_dir), str(truth_path), str(sleep_s),
            str(epochs)]  # fmt: skip


# --------------------------------------------------------------------------- parent


def generate(out: Path) -> float:
    """Both children, in parallel, into a fresh `out`; returns the wall time in seconds."""
    from tests.support import forked_python  # here: this file also runs as a script

    started = time.monotonic()
    out.mkdir(parents=True)
    procs = [
        forked_python.popen(
            [sys.executable, __file__, f"--{name}", str(out)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in FRAMEWORKS
    ]
    outputs = [p.communicate(timeout=GENERATE_TIMEOUT_S)[0] for p in procs]
    failed = [
        f"--{name} exited {p.returncode}:\n{text}"
        for name, p, text in zip(FRAMEWORKS, procs, outputs, strict=True)
        if p.returncode
    ]
    if failed:
        raise RuntimeError("training runs failed:\n" + "\n".join(failed))
    return time.monotonic() - started


def training_runs_folder(base: Path) -> Path:
    """`base/training_runs-v<VERSION>`: generated once (atomically renamed into place), reused."""
    final = base / f"training_runs-v{VERSION}"
    if all((final / TRUTH.format(f)).is_file() for f in FRAMEWORKS):
        return final
    tmp = base / f".training_runs-v{VERSION}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    generate(tmp)
    try:
        os.rename(tmp, final)
    except OSError:  # another session won the race: its set is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def session_training_runs(keras_checkpoints: Path, shared_base: Path) -> Path:
    """The session's runs: cached beside the Keras fixtures when CKPT_TEST_FIXTURES names them
    (inside that folder, once its manifest exists, so its own generation is never disturbed),
    else generated into `shared_base` (the session's folder every xdist worker shares), by the
    first worker that asks while the others wait (`shared_fixtures.exclusive`)."""
    base = keras_checkpoints if os.environ.get("CKPT_TEST_FIXTURES") else shared_base
    final = base / f"training_runs-v{VERSION}"
    if all((final / TRUTH.format(f)).is_file() for f in FRAMEWORKS):
        return final
    with exclusive(base.parent / f".{base.name}-training_runs.lock"):
        return training_runs_folder(base)


def load_truth(folder: Path) -> dict[str, dict]:
    """Both frameworks' truth files merged: {"runs": {...}, "checkpoints": {...}}."""
    merged: dict[str, dict] = {"runs": {}, "checkpoints": {}, "seconds": {}}
    for framework in FRAMEWORKS:
        doc = json.loads((folder / TRUTH.format(framework)).read_text())
        merged["runs"] |= doc["runs"]
        merged["checkpoints"] |= doc["checkpoints"]
        merged["seconds"][framework] = doc["seconds"]
    return merged


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("--keras3", "--tfkeras"):
        framework_child(argv[0][2:], Path(argv[1]).resolve())
        return 0
    if len(argv) == 5 and argv[0] == "--live":
        live_child(Path(argv[1]).resolve(), Path(argv[2]), float(argv[3]), int(argv[4]))
        return 0
    if len(argv) == 1 and not argv[0].startswith("-"):
        print(f"generated in {generate(Path(argv[0]).resolve()):.1f} s")
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
