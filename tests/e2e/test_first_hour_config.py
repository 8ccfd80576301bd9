"""Issue 21 ("The first hour"), item 6: `ckpt` does not depend on the working folder.

A read command never creates a catalog: with none where the config says, it exits 2 naming the
config and the catalog it looked at. And the obvious ways to run the daemon leave a config that
every later `ckpt` finds from any folder, without --config: the README's first command
(`mkdir -p runs && ckpt serve` in a clone, on the bundled `config.yaml`), the user unit
(`~/.config/ckpt/config.yaml`) and the system unit (`/etc/ckpt/config.yaml`).

Real `ckpt` subprocesses (`python -m ckpt_daemon` without --config), real Keras 3 checkpoints,
a real `ckpt serve`; HOME points into the test's folder and no CKPT_/XDG_ variable is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt_daemon.settings import locations
from tests.support import ZIP_FILES, ZIP_RUN, keras_csv

pytestmark = pytest.mark.slow

VAL_LOSS = [1.683, 1.663, 1.643]  # the values in the names of ZIP_FILES
REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
READS = [
    ("list",),
    ("best", "--metric", "val_loss"),
    ("runs",),
    ("show", "1"),
    ("log",),
    ("history", "--run", "exp"),
    ("latest",),
    ("trash", "list"),
]


class User:
    """A home folder and an environment without any ckpt setting: `ckpt` as a new user runs it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.home = tmp, tmp / "home"
        self.home.mkdir()
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("CKPT_", "XDG_", "COLUMNS"))
        }
        self.env = {**env, "HOME": str(self.home)}

    def ckpt(self, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ckpt_daemon", *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd,
            env=self.env,
        )


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


def a_run(folder: Path, fixtures: Path) -> Path:
    """The three real epochs of k3/run_zip as run `exp` of the root `folder`."""
    run = folder / "exp"
    run.mkdir(parents=True)
    for name in ZIP_FILES:
        shutil.copy2(fixtures / ZIP_RUN / name, run / name)
    # Keras's CSVLogger beside them: the `vl1.683` of the names is val_loss
    rows = [{"epoch": i, "loss": 1.5 - 0.1 * i, "val_loss": v} for i, v in enumerate(VAL_LOSS)]
    (run / "training.log").write_text(keras_csv(rows))
    return run


def test_a_read_command_never_creates_a_catalog(user: User) -> None:
    empty = user.tmp / "empty"
    empty.mkdir()
    for args in READS:
        done = user.ckpt(empty, *args)
        assert done.returncode == 2, (args, done.returncode, done.stdout, done.stderr)
        said = done.stderr
        assert len(said.strip().splitlines()) == 1, said
        # which catalog and config it looked at, and how to name the right one
        assert str(empty / ".ckpt" / "catalog.db") in said, said
        assert "built-in default" in said and "./config.yaml" in said, said
        assert "--config" in said and "CKPT_CONFIG" in said, said
        assert list(empty.iterdir()) == [], (args, list(empty.iterdir()))
    status = user.ckpt(empty, "status", "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["running"] is False and "no catalog" in doc["reason"]
    assert list(empty.iterdir()) == []
    # `ckpt scan` is the command that creates one (and says so)
    scanned = user.ckpt(empty, "scan")
    assert "created a new catalog" in scanned.stderr
    assert (empty / ".ckpt" / "catalog.db").is_file()


def test_readme_first_command_is_found_from_any_folder(user: User, keras_checkpoints: Path) -> None:
    clone = user.tmp / "clone"
    clone.mkdir()
    shutil.copy2(REPO / "config.yaml", clone / "config.yaml")  # the bundled config, as cloned
    (clone / "runs").mkdir()  # `mkdir -p runs`
    a_run(clone / "runs", keras_checkpoints)
    log = (user.tmp / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "ckpt_daemon", "serve"],  # `ckpt serve`, in the clone
        cwd=clone,
        env=user.env,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 240  # a loaded 2-core machine: generous
        while time.monotonic() < deadline:
            done = user.ckpt(clone, "list", "--json")
            if done.returncode == 0 and len(json.loads(done.stdout)) == len(ZIP_FILES):
                break
            assert serve.poll() is None, (user.tmp / "serve.log").read_text()
            time.sleep(0.5)
        else:
            raise AssertionError(
                "serve did not index the run\n" + (user.tmp / "serve.log").read_text()
            )
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C
        serve.wait(timeout=120)
        log.close()
    best = str(clone / "runs" / "exp" / ZIP_FILES[-1])
    empty = user.tmp / "elsewhere"
    empty.mkdir()
    for cwd in (empty, clone / "runs", clone / "runs" / "exp"):
        listed = user.ckpt(cwd, "list", "--json")
        assert listed.returncode == 0, (cwd, listed.stderr)
        assert sorted(Path(r["path"]).name for r in json.loads(listed.stdout)) == ZIP_FILES
        found = user.ckpt(cwd, "best", "--metric", "val_loss")
        assert (found.returncode, found.stdout.strip()) == (0, best), (cwd, found.stderr)
        status = json.loads(user.ckpt(cwd, "status", "--json").stdout)
        assert status["config"] == str(clone / "config.yaml"), status
        assert not (cwd / ".ckpt").exists()
    # the record is gone with its config: the built-in default again, never a stale answer
    (clone / "config.yaml").unlink()
    gone = user.ckpt(empty, "list")
    assert gone.returncode == 2 and "built-in default" in gone.stderr, gone.stderr


def unit_config(unit: Path, home: Path) -> Path:
    """The `--config PATH` of a unit's ExecStart, `%h` as systemd expands it."""
    exec_start = re.search(r"^ExecStart=(.*)$", unit.read_text(), re.MULTILINE)
    assert exec_start, unit
    found = re.search(r"--config\s+(\S+)", exec_start.group(1))
    assert found, exec_start.group(0)
    return Path(found.group(1).replace("%h", str(home)))


def test_the_units_configs_are_found_from_any_folder(user: User, keras_checkpoints: Path) -> None:
    system = unit_config(UNITS / "ckpt-daemon.service", user.home)
    assert system in locations.search_path(user.env), system
    own = unit_config(UNITS / "user" / "ckpt-daemon.service", user.home)
    assert own in locations.search_path(user.env), own
    # The user unit's config, run as the unit runs it, then read from anywhere without --config.
    own.parent.mkdir(parents=True)
    root = user.tmp / "training"
    a_run(root, keras_checkpoints)
    own.write_text(f"state_dir: {user.tmp / 'state'}\nroots:\n  - path: {root}\n")
    once = user.ckpt(user.tmp, "--config", str(own), "serve", "--once")
    assert once.returncode == 0, once.stderr
    empty = user.tmp / "elsewhere"
    empty.mkdir()
    for cwd in (empty, root, root / "exp"):
        found = user.ckpt(cwd, "best", "--metric", "val_loss")
        assert (found.returncode, found.stdout.strip()) == (0, str(root / "exp" / ZIP_FILES[-1]))
        assert not (cwd / ".ckpt").exists()
