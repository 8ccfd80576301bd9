"""The tests' forked `ckpt` (support/forked_cli.py) is the `ckpt` a user runs: the same
output, errors and exit codes as a fresh `python -m ckpt_daemon`, its own process for signals,
timeouts and stdin, and side by side with others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import Workspace
from tests.support.forked_cli import FRESH, ForkedCommands, ckpt_process, ckpt_start


def fresh(args: list[str], cwd: Path, **kw: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **kw},
    )


def test_forked_and_fresh_commands_print_and_exit_alike(workspace: Workspace) -> None:
    assert not FRESH, "CKPT_TEST_FRESH_CLI is set: this test compares the two"
    config = str(workspace.config)
    assert fresh(["--config", config, "scan"], workspace.base).returncode == 0  # the catalog
    commands = [
        ["--version"],
        ["--config", config, "scan"],
        ["--config", config, "list", "--json"],
        ["--config", config, "status"],
        ["--config", config, "best", "--metric", "val_loss"],  # no such metric yet: exit 2
        ["--config", config, "show", "999"],  # not found
        ["no-such-command"],
        ["list", "--help"],
    ]
    codes = set()
    for args in commands:
        forked = ckpt_process(args, cwd=workspace.base, timeout=120)
        alone = fresh(args, workspace.base)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            alone.returncode,
            alone.stdout,
            alone.stderr,
        ), args
        codes.add(forked.returncode)
    assert len(codes) >= 3  # success, a usage error and a not-found among them


def test_the_environment_and_folder_are_the_callers(workspace: Workspace, tmp_path: Path) -> None:
    """What the command reads at run time (CKPT_DB, the working folder a relative URL is
    resolved in) comes with each call, not from the zygote's start."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    args = ["--config", str(workspace.config), "status", "--json"]
    env = {**os.environ, "CKPT_DB": "sqlite:///relative.db"}
    forked = ckpt_process(args, cwd=other, env=env, timeout=120)
    alone = fresh(args, other, CKPT_DB="sqlite:///relative.db")
    assert forked.returncode == alone.returncode == 0, forked.stderr
    assert forked.stdout == alone.stdout
    assert f"no catalog at {other / 'relative.db'}" in forked.stdout


def test_a_timeout_kills_the_command(workspace: Workspace) -> None:
    workspace.run("scan")
    waiting = ["--config", str(workspace.config), "wait", "--run", "nothing", "--timeout", "10m"]
    with pytest.raises(subprocess.TimeoutExpired):
        ckpt_process(waiting, cwd=workspace.base, timeout=2)


def test_a_started_daemon_is_signalled_and_reaped_as_its_own_process(
    workspace: Workspace,
) -> None:
    log = workspace.base / "serve.log"
    with open(log, "w") as out:
        serve = ckpt_start(
            ["--config", str(workspace.config), "serve"], output=out.fileno(), cwd=workspace.base
        )
    assert serve.pid not in (os.getpid(), os.getppid())
    with pytest.raises(subprocess.TimeoutExpired):
        serve.wait(timeout=1)
    assert serve.poll() is None
    serve.send_signal(signal.SIGKILL)
    assert serve.wait(timeout=60) == -signal.SIGKILL
    assert serve.poll() == -signal.SIGKILL


def test_commands_run_side_by_side(workspace: Workspace) -> None:
    """The zygote never waits for a command: while a `ckpt wait` blocks, another command is
    forked, runs and ends; the wait is still running after it (no clock involved)."""
    workspace.run("scan")
    config = ["--config", str(workspace.config)]
    log = workspace.base / "wait.log"
    with open(log, "wb") as out:
        waiting = ckpt_start(
            [*config, "wait", "--run", "nothing", "--timeout", "10m"],
            output=out.fileno(),
            cwd=workspace.base,
        )
    try:
        done = ckpt_process([*config, "list", "--json"], cwd=workspace.base, timeout=120)
        assert done.returncode == 0, done.stderr
        assert isinstance(json.loads(done.stdout), list)
        assert waiting.poll() is None, log.read_text()  # still blocked in its wait
    finally:
        waiting.kill()
    assert waiting.wait(timeout=60) == -signal.SIGKILL


def test_the_campaigns_commands_start_with_their_environment_in_a_group_of_their_own(
    workspace: Workspace, tmp_path: Path
) -> None:
    """ForkedCommands (the bench campaigns' launcher in the suite): a command whose environment
    sets PYTHONPATH runs with it from its start (here a `matplotlib` that fails to import:
    `ckpt plot` says so), and a started command leads a process group of its own, which the
    campaigns kill whole."""
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    path = os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])
    config = ["--config", str(workspace.config)]
    commands = ForkedCommands()
    done = commands.run(
        [*config, "plot", "--run", "exp1", "--metric", "val_loss", "-o", "out.png"],
        env={**os.environ, "PYTHONPATH": path},
        cwd=workspace.base,
        timeout=120,
    )
    assert done.returncode == 2 and "needs matplotlib" in done.stderr, done.stderr
    with open(workspace.base / "wait.log", "wb") as log:
        waiting = commands.start(
            [*config, "wait", "--run", "nothing", "--timeout", "10m"],
            env=dict(os.environ),
            cwd=workspace.base,
            stderr=log.fileno(),
        )
    try:
        assert os.getpgid(waiting.pid) == waiting.pid == os.getsid(waiting.pid)
        assert waiting.poll() is None
    finally:
        os.killpg(waiting.pid, signal.SIGKILL)
    assert waiting.wait(timeout=60) == -signal.SIGKILL
