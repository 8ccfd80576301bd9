"""The versions' disk campaign (issue 20, item 2): real Keras training on a small tmpfs under
`ckpt serve` with the shipped config (only its root and state folder moved), where the kept
versions of the rewritten files would fill the filesystem.

`python version_space.py --driver OUT [--fs-mb N] [--width W] [--epochs E] [--fixtures DIR]`
(DIR: the generated Keras checkpoints, default `$CKPT_TEST_FIXTURES`) must run in a
private mount namespace (`unshare -m --propagation private`, as root). It mounts a tmpfs of
`--fs-mb` over OUT/root and starts `ckpt serve` (the catalog in OUT/state, outside the tmpfs).
The job (`--train`) trains a Keras 3 model whose `.keras` (with Adam's slots) is about `--width`**2
* 12 bytes, with `ModelCheckpoint("best.h5", save_best_only=True)`,
`ModelCheckpoint("model.keras")` each epoch (a fixed name, not a rolling pointer such as
`last.keras`, whose generations are not copied since issue 39) and a CSVLogger, in two halves:
after the first the driver runs `ckpt prune` (the versions' own policy, as the retention job would:
some versions go to the trash) and puts two numbered checkpoints of another run in the trash (`ckpt
prune --keep-last 1 --run other`); then the second half (its last two epochs worse: best.h5 stays,
model.keras is rewritten), and a last save of a new file (`final.keras`, the trainer's "next save"
the issue saw fail); then `ckpt prune` again. The trainer records the free space it has after each
epoch (its saves done, our copies made meanwhile). A thread samples statvfs every 5 ms meanwhile:
the floor free space reached. Then the self-cleanup rounds: each writes a blob that leaves 4 kB
free (another job's data), and waits until the service has freed what it frees of its own.
OUT/results.json holds the job's outcome, the floor, `ckpt du`, `log`, `list`, `metrics`, the files
on the tmpfs (and their bytes), and the service's log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 300
# An epoch's work: the service has time to capture between two saves. The trainer waits until
# the service's log shows each of the epoch's saves indexed and its copy kept or skipped, at
# most PAUSE_MAX_S (then it goes on, as a trainer would: the service is just late).
PAUSE_MAX_S = 30.0
ROUNDS = 8  # self-cleanup rounds at most (each frees what it can of ours)
CAPTURED = ("event=version_kept", "event=capture_skipped")


def train(run: Path, width: int, epochs: int, handshake: Path, serve_log: Path) -> None:
    import numpy as np

    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 32)).astype("float32")
    y = (x[:, :1] * 2 + rng.normal(size=(512, 1)) * 0.3).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(width),
            keras.layers.Dense(width),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.0005), loss="mse")
    # The last two epochs with a learning rate far too high: val_loss gets worse, so best.h5
    # stays as it is while model.keras is rewritten, and the best version is an old one.
    slow_down = keras.callbacks.LearningRateScheduler(
        lambda e, lr: 0.0005 if e < epochs - 2 else 0.05
    )
    run.mkdir(parents=True, exist_ok=True)
    half = epochs // 2

    free_after: list[int] = []  # free space the trainer has for its next save, each epoch
    saves: dict[Path, int] = {}  # file: saves so far
    seen: dict[Path, int] = {}  # file: the mtime of its last save seen

    class Pace(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            for path in (run / "best.h5", run / "model.keras"):
                mtime = path.stat().st_mtime_ns if path.exists() else 0
                if mtime != seen.get(path, 0):
                    seen[path] = mtime
                    saves[path] = saves.get(path, 0) + 1
            _wait_for_captures(serve_log, saves)
            free_after.append(_free(run))
            if epoch + 1 == half:  # the first half is done: the driver prunes, then says go
                (handshake / "half").write_text("")
                deadline = time.monotonic() + DEADLINE_S
                while not (handshake / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.1)

    model.fit(
        x,
        y,
        validation_split=0.25,
        epochs=epochs,
        verbose=0,
        callbacks=[
            keras.callbacks.CSVLogger(str(run / "training.log")),
            slow_down,
            keras.callbacks.ModelCheckpoint(str(run / "best.h5"), save_best_only=True),
            keras.callbacks.ModelCheckpoint(str(run / "model.keras")),
            Pace(),
        ],
    )
    before_final = _free(run)
    model.save(run / "final.keras")  # a new file of the same size: the trainer's next save
    print("saved final.keras", flush=True)
    doc = {"free_after_epoch": free_after, "free_before_final": before_final}
    (handshake / "free.json").write_text(json.dumps(doc))


def _wait_for_captures(serve_log: Path, saves: dict[Path, int]) -> None:
    """Until every save so far of each file has its capture line (kept or skipped) in the
    service's log, polled every 50 ms (a file read, no process), PAUSE_MAX_S at most."""
    deadline = time.monotonic() + PAUSE_MAX_S
    while time.monotonic() < deadline:
        lines = [ln for ln in serve_log.read_text().splitlines() if any(c in ln for c in CAPTURED)]
        if all(sum(f" path={path} " in ln for ln in lines) >= n for path, n in saves.items()):
            return
        time.sleep(0.05)


def driver(out: Path, fs_mb: int, width: int, epochs: int, fixtures: Path) -> None:
    root, state, handshake = out / "root", out / "state", out / "handshake"
    for folder in (root, state, handshake):
        folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={fs_mb}m", "tmpfs", str(root)], check=True)
    text = (REPO / "config.yaml").read_text()
    text = text.replace("state_dir: ./.ckpt\n", f"state_dir: {state}\n")
    # The reserve is what this job measures: on a filesystem of a few MB the budget of all our
    # copies (`versions.budget`, issue 39: a quarter of the space they may use) would skip
    # them before the reserve is ever reached, so it is opened up here.
    assert "  budget: 25%\n" in text
    text = text.replace("  budget: 25%\n", "  budget: 99%\n")
    config = out / "config.yaml"
    config.write_text(text.replace("  - path: ./runs\n", f"  - path: {root}\n"))
    ckpt = [sys.executable, "-m", "ckpt_daemon", "--config", str(config)]
    log_path = out / "serve.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    serve = subprocess.Popen([*ckpt, "serve"], stdout=log, stderr=log, cwd=REPO)
    results: dict[str, Any] = {"fs_bytes": _total(root) if root.exists() else 0}
    sampler = _Floor(root)
    try:
        _wait(lambda: "event=ready" in log_path.read_text(), "the service ready")
        sampler.start()
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
        env.pop("TF_USE_LEGACY_KERAS", None)
        run = root / "run"
        argv = [sys.executable, __file__, "--train", str(run), str(width), str(epochs)]
        job = subprocess.Popen(
            [*argv, str(handshake), str(log_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        _wait(lambda: (handshake / "half").exists() or job.poll() is not None, "half the epochs")
        if job.poll() is None:
            _wait(_CaughtUp(ckpt, run, log_path), "the first half indexed")
            results["prune_versions"] = _json([*ckpt, "prune", "--json"])
            _other_trash(ckpt, root, fixtures)
            (handshake / "go").write_text("")
        output, _ = job.communicate(timeout=DEADLINE_S)
        results["job"] = {"returncode": job.returncode, "output": output}
        if (handshake / "free.json").exists():
            results["trainer"] = json.loads((handshake / "free.json").read_text())
        if job.returncode == 0:
            _wait(_CaughtUp(ckpt, run, log_path, "final.keras"), "every save indexed")
        sampler.stop()
        results["floor_free_bytes"] = sampler.floor
        # The retention job's pass (the versions' own policy) at the end of training too: the
        # rounds then find versions in the trash, old versions and the user's trash.
        results["prune_end"] = _json([*ckpt, "prune", "--json"])
        results["du"] = _json([*ckpt, "du", "--json"])
        results["files_before_rounds"] = _files(root)
        results["rounds"] = _rounds(root, ckpt, log_path)
        results["list"] = [
            row
            for status in ("ok", "standby", "trashed", "purged")
            for row in (_json([*ckpt, "list", "--status", status, "--json"]) or [])
        ]
        results["log"] = _json([*ckpt, "log", "--json"])
        results["du_after"] = _json([*ckpt, "du", "--json"])
        results["metrics"] = subprocess.run(
            [*ckpt, "metrics"], capture_output=True, text=True
        ).stdout
        results["files"] = _files(root)
        results["free_bytes"] = _free(root)
    finally:
        sampler.stop()
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
        results["serve_returncode"] = serve.returncode
        results["serve_log"] = log_path.read_text()
        (out / "results.json").write_text(json.dumps(results))


def _other_trash(ckpt: list[str], root: Path, fixtures: Path) -> None:
    """Two numbered checkpoints of another run (real Keras files of the generated set in
    `fixtures`), one of them trashed by `ckpt prune --keep-last 1`: the trash that is not
    versions'."""
    source = fixtures / "k3" / "run_zip"
    other = root / "other"
    other.mkdir()
    for name in ("e01-vl1.683.keras", "e02-vl1.663.keras", "training.log"):
        (other / name).write_bytes((source / name).read_bytes())
    log = root.parent / "serve.log"
    _wait(_CaughtUp(ckpt, other, log, "e02-vl1.663.keras"), "the other run indexed")
    subprocess.run([*ckpt, "prune", "--keep-last", "1", "--run", "other"], check=True)


def _rounds(root: Path, ckpt: list[str], serve_log: Path) -> list[dict[str, Any]]:
    """Another job's data fills the filesystem to 4 kB free, round after round: each time the
    service gives up what it gives up of its own (the reserve), until nothing of ours is left.

    The service's log says when a round is over (lines, not sleeps): its first pass below the
    reserve is logged (`space_reserve_low`, after its acts), then the episode ends
    (`space_reserve_end`) once it freed enough; 3 s without that end after the pass, or 20 s
    in all, and the round is judged by the free space as it is."""
    rounds = []
    before = len(_json([*ckpt, "log", "--json"]) or [])
    for n in range(ROUNDS):
        ends = _count(serve_log, "event=space_reserve_end")
        lows = _count(serve_log, "event=space_reserve_low")
        blob = root / f"blob-{n}.bin"
        room = _free(root) - 4096
        if room > 0:
            with open(blob, "wb") as f:
                f.write(b"\1" * room)
        written = time.monotonic()
        while time.monotonic() - written < 20:  # the service acts within a second or two
            if _count(serve_log, "event=space_reserve_low") > lows or _free(root) > 64 * 1024:
                break
            if _count(serve_log, "event=space_reserve_end") > ends:
                break
            time.sleep(0.05)
        passed = time.monotonic()
        while time.monotonic() - written < 20 and time.monotonic() - passed < 3:
            if _count(serve_log, "event=space_reserve_end") > ends:
                break  # freed enough: the next round starts a new episode
            time.sleep(0.05)
        freed = _free(root) > 64 * 1024
        log = _json([*ckpt, "log", "--json"]) or []
        events, before = log[before:], len(log)  # the next round's start: nothing runs between
        rounds.append({"blob": room, "freed": freed, "free": _free(root), "events": events})
        if not freed:
            break  # nothing of ours is left
    return rounds


def _count(log: Path, what: str) -> int:
    return log.read_text().count(what)


class _CaughtUp:
    """Every file's current generation indexed in `run` (the job no longer writes: stat ==
    row), `name` with status ok: one `ckpt list --json` asked only when the service's log has
    grown since the last answer (an indexed file is logged), or every 5 s."""

    def __init__(self, ckpt: list[str], run: Path, log: Path, name: str = "model.keras") -> None:
        self.ckpt, self.run, self.log, self.name = ckpt, run, log, name
        self.log_size, self.asked = -1, 0.0

    def __call__(self) -> bool:
        size = self.log.stat().st_size
        if size == self.log_size and time.monotonic() - self.asked < 5.0:
            return False
        self.log_size, self.asked = size, time.monotonic()
        listed = _json([*self.ckpt, "list", "--run", self.run.name, "--json"]) or []
        rows = {row["path"]: row for row in listed}
        shown = rows.get(str(self.run / self.name))
        if not shown or shown.get("status") != "ok":
            return False
        for path in self.run.glob("*.*"):
            if path.suffix in (".h5", ".keras"):
                row = rows.get(str(path))
                if not row or row.get("size_bytes") != path.stat().st_size:
                    return False
        return True


class _Floor(threading.Thread):
    """The lowest free space seen, sampled every 5 ms."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root, self.floor = root, _free(root)
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            self.floor = min(self.floor, _free(self.root))
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _total(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def _json(argv: list[str]) -> Any:
    done = subprocess.run(argv, capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


if __name__ == "__main__":
    if sys.argv[1] == "--train":
        run, width, epochs, handshake, serve_log = sys.argv[2:7]
        train(Path(run), int(width), int(epochs), Path(handshake), Path(serve_log))
    else:
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--driver", type=Path, required=True)
        parser.add_argument("--fs-mb", type=int, default=10)
        parser.add_argument("--width", type=int, default=256)
        parser.add_argument("--epochs", type=int, default=10)
        # The generated Keras checkpoints (tests/support/keras_fixtures.py): the other run's.
        default = os.environ.get("CKPT_TEST_FIXTURES", "/tmp/ckpt-fixtures")
        parser.add_argument("--fixtures", type=Path, default=Path(default))
        args = parser.parse_args()
        driver(args.driver, args.fs_mb, args.width, args.epochs, args.fixtures)
