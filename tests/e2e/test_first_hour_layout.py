"""Issue 21 ("The first hour"), item 8: at 80 and 100 columns, paths are shortened first and
metrics last: `list` keeps `val_loss` (it shortens the path instead), prune plan lines fit,
`log` keeps a checkpoint's whole file name.

The terminal is real (as tests/e2e/test_terminal_layout.py): `ckpt` inside a detached tmux
session 80 or 100 columns wide, the pane captured as text, saved in the test's folder. The
checkpoints are real Keras 3 files in a run nested as users nest them, named by a Keras
template with four decimals, with a CSVLogger log of four metrics.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, keras_csv

pytestmark = pytest.mark.slow

TMUX = shutil.which("tmux")
END = "__CKPT_DONE__"
RUN = "resnet50/2026-12-01_lr0.001_bs64_augment/checkpoints"
NAMES = [f"model.{epoch:02d}-{0.8225 + 0.01 * (3 - epoch):.4f}.keras" for epoch in (1, 2, 3)]
_sessions = itertools.count()


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("layout-first-hour"))
    run = ws.root / RUN
    run.mkdir(parents=True)
    for source, name in zip(ZIP_FILES, NAMES, strict=True):
        shutil.copy2(keras_checkpoints / ZIP_RUN / source, run / name)
    rows = [
        {
            "epoch": i,
            "loss": 0.9 - 0.05 * i,
            "accuracy": 0.61 + 0.02 * i,
            "val_loss": float(name.split("-")[1].removesuffix(".keras")),
            "val_accuracy": 0.58 + 0.02 * i,
        }
        for i, name in enumerate(NAMES)
    ]
    (run / "training.log").write_text(keras_csv(rows))
    ws.run("scan")
    ws.run("pin", str(run / NAMES[2]))
    ws.run("unpin", str(run / NAMES[2]))
    # a run with a trashed file: the log has a reason to show beside the paths
    scratch = ws.root / "scratch"
    scratch.mkdir()
    for source in ZIP_FILES[:2]:
        shutil.copy2(keras_checkpoints / ZIP_RUN / source, scratch / source)
    ws.run("scan")
    ws.run("prune", "--run", "scratch", "--keep-last", "1")
    return ws


@pytest.fixture(scope="module")
def socket() -> object:
    if TMUX is None:
        raise AssertionError("tmux is needed for the terminal screenshots (apt install tmux)")
    name = f"ckpt-first-hour-{os.getpid()}"
    yield name
    subprocess.run([TMUX, "-L", name, "kill-server"], capture_output=True, check=False)


def screenshot(ws: Workspace, socket: str, folder: Path, width: int, *args: str) -> str:
    """`ckpt ARGS` in a fresh tmux window `width` columns wide; the pane once it is done."""
    assert TMUX is not None
    name = f"s{next(_sessions)}"
    ckpt = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args]
    script = f"cd {shlex.quote(str(ws.base))} && {shlex.join(ckpt)} 2>&1; echo {END}; sleep 600"
    # A server of its own per screen: a server exits with its last session, and a session
    # asked of one that is exiting fails ("server exited unexpectedly").
    tmux = [TMUX, "-L", f"{socket}-{name}", "-f", "/dev/null"]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", name, "-x", str(width), "-y", "50", script],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    deadline = time.monotonic() + 180  # a loaded 2-core machine: generous
    try:
        while True:
            text = _capture(tmux, name, join=False)
            if END in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        joined = _capture(tmux, name, join=True)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
    screen = text.split(END)[0].rstrip("\n") + "\n"
    (folder / f"screen-{width}-{'_'.join(args)[:60].replace('/', '_')}.txt").write_text(screen)
    assert END in text, f"`ckpt {' '.join(args)}` did not finish in time:\n{screen}"
    assert joined.split(END)[0].rstrip("\n") + "\n" == screen, f"a line wrapped:\n{screen}"
    long = [line for line in screen.splitlines() if len(line) > width]
    assert not long, f"lines over {width} columns:\n{screen}"
    return screen


def _capture(tmux: list[str], name: str, *, join: bool) -> str:
    flags = ["-p", "-S", "-", *(["-J"] if join else [])]
    done = subprocess.run(
        [*tmux, "capture-pane", *flags, "-t", name], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.parametrize("width", [80, 100])
def test_list_shortens_the_path_and_keeps_the_metrics(
    ws: Workspace, socket: str, tmp_path: Path, width: int
) -> None:
    screen = screenshot(ws, socket, tmp_path, width, "list")
    head, *rows = screen.splitlines()
    rows = [row for row in rows if "scratch/" not in row and not row.startswith("(")]
    assert head.split()[-4:] == ["accuracy", "val_accuracy", "loss", "val_loss"], screen
    if width == 100:  # room for every column once the path is cut down to the file names
        assert "columns not shown" not in screen, screen
        assert head.split()[:6] == ["ID", "PATH", "EPOCH", "SIZE", "STATUS", "accuracy"], screen
    else:  # 80: the other columns go first, every metric stays
        note = screen.splitlines()[-1]
        assert "columns not shown" in note and "loss" not in note, screen
    assert len(rows) == 3 and all("…" in row for row in rows), screen
    for row, name in zip(rows, NAMES, strict=True):
        assert f"/{name} " in row, screen  # the file name whole


@pytest.mark.parametrize("width", [80, 100])
def test_prune_plan_lines_fit(ws: Workspace, socket: str, tmp_path: Path, width: int) -> None:
    screen = screenshot(
        ws, socket, tmp_path, width, "prune", "-n", "--run", RUN, "--keep-best", "1",
        "--metric", "val_loss",
    )  # fmt: skip
    decisions = [line for line in screen.splitlines() if line.startswith(("  keep", "  trash"))]
    assert len(decisions) == 3, screen
    for name in NAMES:
        assert any(f"{name}  " in line for line in decisions), screen  # the file name whole


@pytest.mark.parametrize("width", [80, 100])
def test_log_keeps_the_whole_file_name(
    ws: Workspace, socket: str, tmp_path: Path, width: int
) -> None:
    screen = screenshot(ws, socket, tmp_path, width, "log")
    rows = [line for line in screen.splitlines()[1:] if " indexed " in line and "model." in line]
    assert len(rows) == 3, screen
    for name in NAMES:
        assert any(f"/{name}" in row or f" {name}" in row for row in rows), screen
    pinned = [line for line in screen.splitlines() if " pin " in line or " unpin " in line]
    assert len(pinned) == 2 and all(NAMES[2] in line for line in pinned), screen
