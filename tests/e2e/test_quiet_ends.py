"""Commands that end for reasons outside them end with one clear line, or quietly, never
"unexpected error" (issue 41, item 7): `ckpt ... | head` (the reader of the pipe left) exits
141 saying nothing; `ckpt wait` whose SQLite catalog is deleted or overwritten while it waits
says so at once (exit 2, as a command started on such a file does), instead of waiting out its
timeout or ending in `DatabaseError`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ckpt_daemon.cli.main import BROKEN_PIPE
from tests.support import ZIP_FILES, ZIP_RUN, Workspace
from tests.support.forked_cli import ckpt_start

GENEROUS_S = 60.0  # a loaded 2-core machine; the wait's own timeout is longer still


def test_a_reader_that_left_ends_the_command_quietly(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """A fresh interpreter, as a user's shell starts it (Python ignores SIGPIPE: the write
    fails with EPIPE), its stdout a pipe whose reader is gone, as after `| head -1`."""
    run = workspace.root / ZIP_RUN
    run.mkdir(parents=True)
    shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[0], run / ZIP_FILES[0])
    workspace.run("scan")
    for args in (["list"], ["list", "--json"], ["log"]):
        reader, writer = os.pipe()
        os.close(reader)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "ckpt_daemon", "--config", str(workspace.config), *args],
                stdout=writer,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(writer)
        assert (done.returncode, done.stderr) == (BROKEN_PIPE, ""), args


def _waiting_on(pid: int, catalog: Path) -> bool:
    """Whether process `pid` has the catalog open and its inotify waker armed (both are made
    before the wait's first look at the catalog)."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:  # it ended (reported by the caller) or an fd closed as we looked
        return False
    return str(catalog) in links and "anon_inode:inotify" in links


@pytest.mark.parametrize("fate", ["deleted", "overwritten"])
def test_wait_says_at_once_that_its_catalog_went_away(
    workspace: Workspace, keras_checkpoints: Path, fate: str
) -> None:
    run = workspace.root / ZIP_RUN
    run.mkdir(parents=True)
    shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[0], run / ZIP_FILES[0])
    workspace.run("scan")
    catalog = workspace.base / "state" / "catalog.db"
    args = ["--config", str(workspace.config), "wait", "--run", ZIP_RUN, "--timeout", "10m"]
    with tempfile.TemporaryFile() as output:
        waiting = ckpt_start(args, output=output.fileno(), cwd=workspace.base)
        try:
            deadline = time.monotonic() + GENEROUS_S
            while not _waiting_on(waiting.pid, catalog):
                assert waiting.poll() is None and time.monotonic() < deadline, waiting.poll()
                time.sleep(0.05)
            started = time.monotonic()
            if fate == "deleted":
                for name in ("catalog.db", "catalog.db-wal", "catalog.db-shm"):
                    (catalog.parent / name).unlink(missing_ok=True)
            else:
                with open(catalog, "r+b") as f:  # the same file, now garbage
                    f.write(b"not a catalog " * 2000)
            code = waiting.wait(timeout=GENEROUS_S)
            took = time.monotonic() - started
        finally:
            waiting.kill()
            waiting.wait()
        output.seek(0)
        said = output.read().decode()
    assert code == 2, said
    assert "unexpected error" not in said and "Traceback" not in said, said
    assert len(said.strip().splitlines()) == 1, said
    if fate == "deleted":
        assert f"no catalog at {catalog}: it was deleted while waiting" in said, said
    else:
        assert f"{catalog} is no longer an SQLite catalog" in said, said
    assert took < GENEROUS_S  # never its 10-minute timeout
