"""The disk-pressure test bed: a real Keras 3 job on a small filesystem under `ckpt serve`.

`python disk_pressure.py --driver OUT` must run in a private mount namespace (`unshare -m
--propagation private`, as root): it mounts a tmpfs of FS_MB over OUT/root, starts `ckpt serve`
(catalog outside the tmpfs, in OUT/state, `min_free` MIN_FREE_MB), runs the training job
(`--train`), whose checkpoints would need more than the whole filesystem, waits until the
service has caught up, and writes OUT/results.json: the job's exit code and output, what it
saved with its val_loss, the files left on the tmpfs, `ckpt list`, `log` and `status` as JSON,
and the service's log. The tmpfs goes away with the namespace; the results stay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FS_MB = 10
MIN_FREE_MB = 3
EPOCHS = 12
# The job's "work" per epoch: the guard has a second to react, as it would (the bench that only
# needs the files sets CKPT_BENCH_NO_PAUSE).
PAUSE_S = 0.0 if os.environ.get("CKPT_BENCH_NO_PAUSE") else 0.5
DEADLINE_S = 240


def train(run_dir: Path, truth: Path) -> None:
    """A model of ~75k parameters: each `.keras` with Adam's slots is ~0.9 MB. From the third
    epoch on its learning rate is far too high, so its val_loss is best at epoch 2: the guard,
    which frees the oldest first, must step over that best one."""
    import numpy as np

    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 32)).astype("float32")
    y = (x[:, :1] * 2 + rng.normal(size=(256, 1)) * 0.5).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(256),
            keras.layers.Dense(256),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    run_dir.mkdir(parents=True, exist_ok=True)
    saved: list[dict[str, float]] = []

    class Pause(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            saved.append({"epoch": epoch + 1, "val_loss": float((logs or {})["val_loss"])})
            time.sleep(PAUSE_S)

    model.fit(
        x,
        y,
        validation_split=0.25,
        epochs=EPOCHS,
        verbose=0,
        callbacks=[
            keras.callbacks.CSVLogger(str(run_dir / "training.log")),
            keras.callbacks.ModelCheckpoint(str(run_dir / "epoch_{epoch:02d}.keras")),
            keras.callbacks.LearningRateScheduler(lambda e, lr: 0.003 if e < 2 else 0.1),
            Pause(),
        ],
    )
    truth.write_text(json.dumps(saved))


def driver(out: Path) -> None:
    root, state = out / "root", out / "state"
    root.mkdir(parents=True, exist_ok=True)
    state.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(root)], check=True)
    config = out / "config.yaml"
    config.write_text(
        f"state_dir: {state}\nroots:\n  - path: {root}\n    min_free: {MIN_FREE_MB}MB\n"
        "completion:\n  settle_seconds: 1\n  min_age_seconds: 0.2\n"
        "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
    )
    ckpt = [sys.executable, "-m", "ckpt_daemon", "--config", str(config)]
    log = open(out / "serve.log", "w")  # noqa: SIM115 - closed below
    serve = subprocess.Popen([*ckpt, "serve"], stdout=log, stderr=log)
    results: dict = {}
    try:
        _wait(lambda: "event=ready" in (out / "serve.log").read_text(), "the service ready")
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
        env.pop("TF_USE_LEGACY_KERAS", None)
        job = subprocess.run(
            [sys.executable, __file__, "--train", str(root / "run"), str(out / "truth.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        results["job"] = {"returncode": job.returncode, "output": job.stdout + job.stderr}
        last = root / "run" / f"epoch_{EPOCHS:02d}.keras"

        asked = {"log_size": -1, "at": 0.0}

        def caught_up() -> bool:
            # Asked again only once the service's log has grown (it logs each indexed file and
            # the end of a pressure episode), or every 5 s: polls spawn no CLI in between.
            size = (out / "serve.log").stat().st_size
            if size == asked["log_size"] and time.monotonic() - asked["at"] < 5.0:
                return False
            asked.update(log_size=size, at=time.monotonic())
            shown = _json([*ckpt, "show", str(last), "--json"])
            if not (shown and shown["status"] == "ok"):
                return False
            status = _json([*ckpt, "status", "--json"])
            disk = (status or {}).get("disk") or [{}]
            return bool(disk[0].get("state") == "ok")

        if job.returncode == 0:
            _wait(caught_up, "the last checkpoint indexed and free space above min_free")
        results["list"] = _json([*ckpt, "list", "--all", "--json"])
        results["log"] = _json([*ckpt, "log", "--json"])
        results["status"] = _json([*ckpt, "status", "--json"])
        results["status_text"] = subprocess.run(
            [*ckpt, "status"], capture_output=True, text=True
        ).stdout
        results["files"] = {
            str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()
        }
        st = os.statvfs(root)
        results["free_bytes"] = st.f_bavail * st.f_frsize
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
        results["serve_returncode"] = serve.returncode
        results["serve_log"] = (out / "serve.log").read_text()
        (out / "results.json").write_text(json.dumps(results))


def _json(argv: list[str]) -> object:
    done = subprocess.run(argv, capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


if __name__ == "__main__":
    if sys.argv[1] == "--train":
        train(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        driver(Path(sys.argv[2]))
