"""Issue 12, item 3: long work shows progress. On a terminal a bar (items, bytes, time left)
is drawn under the lines; into a pipe each item's line comes as soon as it is done, without a
bar; `--json` prints its one document at the end, bar-free.

Real parts: `ckpt` subprocesses on real Keras 3 checkpoints (`verify --load` loads them with
Keras in its child), a real terminal (a detached tmux session, captured mid-way) and real
pipes (the first line is read while the command is still running).
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, zip_run

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 100, 30
TMUX = shutil.which("tmux")
END = "__CKPT_DONE__"
DEADLINE = 240.0  # a Keras load in a child takes seconds; a loaded 2-core machine: generous
BAR = re.compile(r"(\d+) of (\d+) checked, \S+ \S+ of \S+ \S+")
_windows = itertools.count()


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    return zip_run(Workspace(tmp_path_factory.mktemp("progress")), keras_checkpoints)


@pytest.fixture(scope="module")
def ids(ws: Workspace) -> list[str]:
    rows = {Path(r["path"]).name: r for r in ws.json("list", "--run", ZIP_RUN)}
    return [str(rows[name]["id"]) for name in ZIP_FILES]


@pytest.fixture(scope="module")
def tmux() -> Iterator[list[str]]:
    if TMUX is None:
        raise AssertionError("tmux is needed for the terminal screenshots (apt install tmux)")
    command = [TMUX, "-L", f"ckpt-progress-{os.getpid()}", "-f", "/dev/null"]
    yield command
    subprocess.run([*command, "kill-server"], capture_output=True, check=False)


def ckpt(ws: Workspace, *args: str) -> list[str]:
    return [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args]


def start_window(tmux: list[str], ws: Workspace, *args: str) -> str:
    """`ckpt ARGS` in a fresh WIDTHxHEIGHT tmux window; END is echoed when it is done."""
    name = f"p{next(_windows)}"
    script = f"cd {shlex.quote(str(ws.base))} && {shlex.join(ckpt(ws, *args))}; echo {END}"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", name, "-x", str(WIDTH), "-y", str(HEIGHT)],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    # remain-on-exit: the pane is still there to capture once the command is done
    subprocess.run([*tmux, "set-option", "-t", name, "remain-on-exit", "on"], check=True)
    subprocess.run([*tmux, "respawn-pane", "-k", "-t", name, script], check=True)
    return name


def capture(tmux: list[str], name: str, *, join: bool = False) -> str:
    """The pane's text from the start of its history (`-J`: lines tmux wrapped, joined)."""
    flags = ["-p", "-S", "-", *(["-J"] if join else [])]
    done = subprocess.run(
        [*tmux, "capture-pane", *flags, "-t", name], capture_output=True, text=True, check=True
    )
    return done.stdout


def wait_for(tmux: list[str], name: str, done: re.Pattern[str] | str) -> str:
    """The pane as soon as it shows `done` (polled: no fixed sleep), or fail at the deadline."""
    deadline = time.monotonic() + DEADLINE
    while True:
        screen = capture(tmux, name)
        found = done in screen if isinstance(done, str) else done.search(screen)
        if found:
            return screen
        assert time.monotonic() < deadline, f"not seen in time: {done}\n{screen}"
        time.sleep(0.1)


def test_verify_load_draws_a_bar_under_its_lines_on_a_terminal(
    ws: Workspace, ids: list[str], tmux: list[str], tmp_path: Path, piped_load: Piped
) -> None:
    """Mid-way through `verify --load` of two checkpoints, the screen holds the first one's
    lines and, under them, the bar: 1 of 2 checked, its bytes, the second one's path. When it
    is done, the bar is gone and the lines remain, each within the terminal's width."""
    name = start_window(tmux, ws, "verify", "--load", *ids[:2])
    mid = wait_for(tmux, name, re.compile(r"^.*1 of 2 checked.*$", re.M))
    (tmp_path / "screen-mid-way.txt").write_text(mid)
    lines = [line for line in mid.splitlines() if line.strip()]
    bar = [i for i, line in enumerate(lines) if BAR.search(line)]
    assert bar and bar[-1] == len(lines) - 1, mid  # the bar is the last line drawn
    drawn = lines[bar[-1]]
    assert f"{ZIP_RUN}/{ZIP_FILES[1]}" in drawn, mid  # the item at work, relative to its root
    assert re.search(r"\d+\.\d kB of \d+\.\d kB", drawn), mid
    first = [line for line in lines[: bar[-1]] if ZIP_FILES[0] in line]
    assert any("hash matches" in line for line in first), mid
    assert any("loads with keras" in line for line in first), mid

    final = wait_for(tmux, name, END).split(END)[0]
    (tmp_path / "screen-done.txt").write_text(final)
    assert not BAR.search(final), final  # transient: no bar left behind
    done = [line for line in final.splitlines() if line.strip()]
    assert len([line for line in done if "loads with keras" in line]) == 2, final
    assert all(len(line) <= WIDTH for line in done), final


@dataclass
class Piped:
    """A command writing into a pipe, read line by line as it comes: each line with whether
    the command was still running when the line arrived; None at the end of its output."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[tuple[str, bool] | None]


@pytest.fixture(scope="module")
def piped_load(ws: Workspace, ids: list[str]) -> Iterator[Piped]:
    """`verify --load ID` into a pipe, started before the terminal test (which asks for it),
    so that the two Keras loads run side by side: one load less of the suite's time."""
    proc = subprocess.Popen(
        ckpt(ws, "verify", "--load", ids[0]),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ws.base,
    )
    lines: queue.Queue[tuple[str, bool] | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((line, proc.poll() is None))
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    yield Piped(proc, lines)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    reader.join(timeout=DEADLINE)  # at the pipe's end: not closed under a reading thread
    assert proc.stdout is not None
    proc.stdout.close()


def test_verify_load_lines_stream_into_a_pipe(piped_load: Piped, ids: list[str]) -> None:
    """The hash verdict of `verify --load` comes down the pipe while the Keras load, seconds
    long, is still ahead of it: a line per item as it finishes, no bar, no escape sequence."""
    received = []
    while (got := piped_load.lines.get(timeout=DEADLINE)) is not None:
        received.append(got)
    assert piped_load.proc.wait(timeout=DEADLINE) == 0
    first, running = received[0]
    assert running, received  # read before the command ended: streamed, not buffered
    assert re.match(rf"^\s*{ids[0]}  ok\s+{ZIP_RUN}/{ZIP_FILES[0]}  hash matches$", first), first
    text = "".join(line for line, _ in received)
    # The load child says what it ran under: the sandbox.
    assert re.search(r"  ok\s+\S+  loads with keras \(sandboxed: [^)]+\)$", text, re.M), text
    assert "\x1b" not in text and "checked" not in text, text


def test_json_is_one_document_without_a_bar(ws: Workspace, ids: list[str], tmux: list[str]) -> None:
    """`--json` on a terminal draws no bar and prints the document a pipe gets, field for
    field; the streamed lines stay out of it."""
    piped = ws.json("verify", *ids)
    assert [set(v) for v in piped] == [{"id", "path", "ok", "detail"}] * len(ids), piped
    name = start_window(tmux, ws, "verify", "--json", *ids)
    screen = wait_for(tmux, name, END).split(END)[0]
    assert not BAR.search(screen) and "checked" not in screen, screen
    joined = capture(tmux, name, join=True).split(END)[0]  # long paths wrap at WIDTH
    assert json.loads(joined) == piped, joined


def test_scan_and_prune_stream_a_line_per_item_into_a_pipe(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """Piped, `scan` says each file it read (a damaged one with its status and why) before
    its summary line, and `prune` each move before its plan; `--json` stays one document."""
    run = workspace.root / ZIP_RUN
    run.mkdir(parents=True)
    for name in ZIP_FILES:
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, run / name)
    whole = (run / ZIP_FILES[0]).read_bytes()
    (run / "cut.keras").write_bytes(whole[: len(whole) - 100])
    scan = workspace.run("scan", check=False)
    assert scan.returncode == 3, scan.stderr  # the cut file
    lines = scan.stdout.splitlines()
    assert lines[-1].startswith("3 indexed, 0 unchanged"), scan.stdout
    read = {line.split()[1]: line.split()[0] for line in lines[:-1]}
    assert read == {f"{ZIP_RUN}/{n}": "indexed" for n in ZIP_FILES} | {
        f"{ZIP_RUN}/cut.keras": "corrupt"
    }, scan.stdout
    assert "\x1b" not in scan.stdout
    again = workspace.run("scan", "--json", check=False)
    assert set(json.loads(again.stdout)) >= {"indexed", "unchanged", "failed"}, again.stdout

    prune = workspace.run("prune", "--run", ZIP_RUN, "--keep-last", "1")
    out = prune.stdout.splitlines()
    moved = [f"trashed {ZIP_RUN}/{n}" for n in ZIP_FILES[:2]]
    assert out[:2] == moved and out[2].startswith(f"{ZIP_RUN}: 2 of "), prune.stdout
    assert "\x1b" not in prune.stdout
