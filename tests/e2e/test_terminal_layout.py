"""Issue 10, item 7: what `ckpt list`, `runs`, `log`, `show` and `verify` print is readable in a
100-column terminal, and complete when piped.

The terminal is real: `ckpt` runs inside a detached tmux session 100 columns wide, and the pane
is captured (`tmux capture-pane`) as a text screenshot, saved in the test's folder and printed
when an assertion fails. The catalog is real too: every generated Keras/TF checkpoint, plus a
run with a long folder name and a CSVLogger log of many metrics (one of them float32 noise).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, copy_generated

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 100, 40
TMUX = shutil.which("tmux")
LONG_RUN = "ablation_study_with_a_rather_long_descriptive_experiment_name_07/checkpoints"
METRIC_NAMES = ("loss", "accuracy", "precision", "recall", "auc", "lr")
NOISY_LR = "0.0010000000474974513"  # float32(0.001) as Keras writes it
END = "__CKPT_DONE__"
_sessions = itertools.count()
ROW = re.compile(r"^\s*\d+  ")  # a listing's row starts with its right-aligned id


def _training_log() -> str:
    header = ["epoch", *METRIC_NAMES, *(f"val_{m}" for m in METRIC_NAMES if m != "lr")]
    lines = [",".join(header)]
    for epoch in range(3):
        values = [
            str(epoch),
            f"{1.2 - 0.1 * epoch:.6f}",  # loss
            f"{0.5 + 0.05 * epoch:.6f}",  # accuracy
            f"{0.61 + 0.01 * epoch:.6f}",  # precision
            f"{0.4 + 0.1 * epoch:.6f}",  # recall
            f"{0.7 + 0.001 * epoch:.6f}",  # auc
            NOISY_LR,
            f"{1.3 - 0.05 * epoch:.6f}",
            f"{0.45 + 0.05 * epoch:.6f}",
            f"{0.55 + 0.02 * epoch:.6f}",
            f"{0.35 + 0.1 * epoch:.6f}",
            f"{0.65 + 0.0001 * epoch:.6f}",
        ]
        lines.append(",".join(values))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    ws = copy_generated(Workspace(tmp_path_factory.mktemp("layout")), keras_checkpoints)
    run = ws.root / LONG_RUN
    run.mkdir(parents=True)
    for epoch, name in enumerate(ZIP_FILES, start=1):
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, run / f"epoch_{epoch:03d}.keras")
    (run / "training.log").write_text(_training_log())
    ws.run("scan")
    return ws


@pytest.fixture(scope="module")
def tmux_server() -> Iterator[str]:
    if TMUX is None:
        raise AssertionError("tmux is needed for the terminal screenshots (apt install tmux)")
    socket = f"ckpt-layout-{os.getpid()}"
    yield socket
    subprocess.run([TMUX, "-L", socket, "kill-server"], capture_output=True, check=False)


def screenshot(ws: Workspace, socket: str, folder: Path, *args: str) -> str:
    """`ckpt ARGS` in a fresh WIDTHxHEIGHT tmux window; the pane as text once it is done."""
    assert TMUX is not None
    name = f"s{next(_sessions)}"
    ckpt = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args]
    script = f"cd {shlex.quote(str(ws.base))} && {shlex.join(ckpt)}; echo {END}; sleep 600"
    tmux = [TMUX, "-L", socket, "-f", "/dev/null"]
    for attempt in range(5):
        started = subprocess.run(
            [*tmux, "new-session", "-d", "-s", name, "-x", str(WIDTH), "-y", str(HEIGHT), script],
            capture_output=True,
            text=True,
            # COLUMNS/LINES (set by some runners, e.g. pytest-xdist workers) would override the
            # window's real size, as they do for any program that asks shutil for it.
            env={
                **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
                "TERM": "xterm-256color",
            },
        )
        # tmux exits with its last session: a new one can reach a server still exiting (the
        # previous screenshot's session just killed), "server exited unexpectedly" (seen in
        # CI); the next attempt starts a new server.
        if started.returncode == 0 or "server exited unexpectedly" not in started.stderr:
            break
        time.sleep(0.2 * (attempt + 1))
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 180  # a loaded 2-core machine: generous
    try:
        while True:
            text = _capture(tmux, name, join=False)
            if END in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        joined = _capture(tmux, name, join=True)
    finally:
        subprocess.run([*tmux, "kill-session", "-t", name], capture_output=True, check=False)
    screen = text.split(END)[0].rstrip("\n") + "\n"
    shot = folder / f"screen-{'_'.join(args).replace('/', '_')[:80]}.txt"
    shot.write_text(screen)
    assert END in text, f"`ckpt {' '.join(args)}` did not finish in time:\n{screen}"
    # -J joins lines the terminal wrapped: equal captures mean no line was wrapped.
    assert joined.split(END)[0].rstrip("\n") + "\n" == screen, f"a line wrapped:\n{screen}"
    return screen


def _capture(tmux: list[str], name: str, *, join: bool) -> str:
    flags = ["-p", "-S", "-", *(["-J"] if join else [])]
    done = subprocess.run(
        [*tmux, "capture-pane", *flags, "-t", name], capture_output=True, text=True, check=True
    )
    return done.stdout


def fits(screen: str) -> None:
    long = [line for line in screen.splitlines() if len(line) > WIDTH]
    assert not long, f"lines over {WIDTH} columns:\n{screen}"


def column_cells(screen: str, header: str) -> tuple[list[str], list[int]]:
    """The cells under the right-aligned column `header`, and where each one's `.` is."""
    lines = screen.splitlines()
    head = lines[0]
    found = re.search(rf"(?<!\S){re.escape(header)}(?!\S)", head)
    assert found, (header, head)
    end = found.end()
    cells, dots = [], []
    for line in lines[1:]:
        if not ROW.match(line) or len(line) < end or line[end - 1] == " ":
            continue  # not a row (a heading line, a note), or no cell here
        cell = line[:end].rsplit(" ", 1)[-1]
        cells.append(cell)
        if "." in cell:
            dots.append(line.rindex(".", 0, end))
    return cells, dots


def test_list_fits_and_aligns_metric_columns(
    ws: Workspace, tmux_server: str, tmp_path: Path
) -> None:
    screen = screenshot(ws, tmux_server, tmp_path, "list", "--metrics", "loss,val_loss")
    fits(screen)
    head = screen.splitlines()[0].split()
    assert head == ["ID", "PATH", "EPOCH", "STEP", "SIZE", "STATUS", "loss", "val_loss"], screen
    for metric in ("loss", "val_loss"):
        cells, dots = column_cells(screen, metric)
        assert len(cells) >= 8 and len(set(dots)) == 1, (metric, cells, dots, screen)
    # The long run's paths are cut from the left, keeping the file name.
    long_rows = [line for line in screen.splitlines() if "epoch_00" in line]
    assert len(long_rows) == 3 and all("…" in row for row in long_rows), screen
    assert all(re.search(r"…\S*/epoch_00\d\.keras ", row) for row in long_rows), screen


def test_step_rows_show_their_step_in_a_step_column(
    ws: Workspace, tmux_server: str, tmp_path: Path
) -> None:
    screen = screenshot(ws, tmux_server, tmp_path, "list", "--run", "k3/tfckpt")
    fits(screen)
    head = screen.splitlines()[0]
    assert head.split()[:4] == ["ID", "PATH", "STEP", "SIZE"], screen  # EPOCH: empty, dropped
    assert not re.search(r"\bs\d+\b", screen), screen
    steps, _ = column_cells(screen, "STEP")
    # ckpt-1, ckpt-2 count saves; their step is the optimizer's count (3 steps per save)
    want = sorted(str(r["step"]) for r in ws.json("list", "--run", "k3/tfckpt"))
    assert sorted(steps) == want == ["3", "6"], screen


def test_many_metrics_keep_rows_on_one_line(
    ws: Workspace, tmux_server: str, tmp_path: Path
) -> None:
    screen = screenshot(ws, tmux_server, tmp_path, "list", "--run", LONG_RUN)
    fits(screen)
    lines = screen.splitlines()
    assert lines[0].split()[:2] == ["ID", "PATH"], screen
    rows = [line for line in lines[1:] if "epoch_00" in line]
    assert len(rows) == 3, screen
    # Eleven metrics do not fit in 100 columns: the rightmost are left out, and it says so.
    assert "columns not shown" in screen and "--columns" in screen, screen


def test_chosen_columns_in_the_chosen_order(
    ws: Workspace, tmux_server: str, tmp_path: Path
) -> None:
    screen = screenshot(
        ws, tmux_server, tmp_path, "list", "--run", LONG_RUN, "--columns", "epoch,lr,val_auc,path"
    )
    fits(screen)
    lines = screen.splitlines()
    assert lines[0].split() == ["EPOCH", "lr", "val_auc", "PATH"], screen
    assert NOISY_LR not in screen
    lrs, _ = column_cells(screen, "lr")
    assert lrs == ["0.00100"] * 3, screen
    aucs, dots = column_cells(screen, "val_auc")
    assert len(set(aucs)) == 3 and len(set(dots)) == 1, screen  # 0.6500, 0.6501, 0.6502


def test_runs_log_show_and_verify_fit(ws: Workspace, tmux_server: str, tmp_path: Path) -> None:
    runs = screenshot(ws, tmux_server, tmp_path, "runs")
    fits(runs)
    assert runs.splitlines()[0].split() == ["RUN", "CHECKPOINTS", "SIZE", "NEWEST"], runs
    assert "ROOT" not in runs and str(ws.root) not in runs
    assert re.search(r"^  best e03-vl1\.643\.keras: .*val_loss 1\.643$", runs, re.M), runs
    assert re.search(r"^  best epoch_00\d\.keras: ", runs, re.M), runs  # cut after the name

    log = screenshot(ws, tmux_server, tmp_path, "log", "--limit", "30")
    fits(log)
    assert log.splitlines()[0].split()[:4] == ["AT", "ACTION", "STATE", "PATH"], log
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  indexed", log, re.M), log
    assert str(ws.root) not in log

    rows = {Path(r["path"]).name: r for r in ws.json("list", "--run", LONG_RUN)}
    shown = rows["epoch_002.keras"]
    show = screenshot(ws, tmux_server, tmp_path, "show", str(shown["id"]))
    fits(show)
    assert NOISY_LR not in show and "metric lr = 0.001" in show, show
    assert "(csv:ablation_study" in show and "checkpoints/training.log" in show, show
    assert "training config loss=" in show and "optimizer config (Adam)" in show, show
    assert "learning rate 0.001953125" in show, show  # 2**-9: exact, every digit kept (once)

    verify = screenshot(ws, tmux_server, tmp_path, "verify", str(shown["id"]))
    fits(verify)
    line = verify.strip().splitlines()[0]
    assert re.match(rf"^\s*{shown['id']}  ok\s+\S*epoch_002\.keras  hash matches$", line), verify


COMMANDS = [
    ("list",),
    ("list", "--run", LONG_RUN),
    ("runs",),
    ("log",),
    ("verify",),
    ("trash", "list"),
    ("history", "--run", LONG_RUN),
    ("du",),
]


def test_history_chart_and_table_fit_the_terminal(
    ws: Workspace, tmux_server: str, tmp_path: Path
) -> None:
    screen = screenshot(ws, tmux_server, tmp_path, "history", "--run", LONG_RUN)
    fits(screen)
    lines = screen.splitlines()
    assert lines[0] == f"val_loss (min) per epoch, run {LONG_RUN}"[:WIDTH], screen
    assert sum("┤" in line for line in lines) == 6 and "◆ best" in screen, screen
    head = next(i for i, line in enumerate(lines) if line.startswith("EPOCH"))
    assert lines[head].split() == ["EPOCH", "val_loss", "loss", "MARKS", "PATH"], screen
    rows = lines[head + 1 :]
    assert [row.split()[0] for row in rows] == ["1", "2", "3"], screen
    assert all(row.endswith(f"epoch_00{i}.keras") for i, row in enumerate(rows, 1)), screen
    assert "…" in rows[0], screen  # the long path is cut from the left to fit


def test_the_docs_history_screen_is_what_ckpt_prints(
    tmp_path: Path, training_runs: Path, tmux_server: str
) -> None:
    """docs/runs.md's `ckpt history` screen: a real Keras run (save_best_only: epochs 3, 6, 7
    saved nothing) after a pin, a prune that trashed three and a deleted file."""
    from ckpt_daemon.api import open_catalog
    from ckpt_daemon.core.retention import Policy

    ws = Workspace(tmp_path / "ws")
    run = ws.root / "best_gaps"
    shutil.copytree(training_runs / "keras3" / "best_gaps", run, copy_function=shutil.copy2)
    with open_catalog(str(ws.config)) as cat:  # the setup in-process: the screen is the test
        cat.scan()
        cat.pin(str(run / "best-04-0.91.keras"))
        cat.prune(["best_gaps"], Policy(keep_last=2))
        (run / "best-08-0.74.keras").unlink()
        cat.scan()
    screen = screenshot(ws, tmux_server, tmp_path, "history", "--run", "best_gaps")
    fits(screen)
    block = RUNS_PAGE.read_text().split("```text\n$ ckpt history --run best_gaps\n", 1)[1]
    assert screen == block.split("```", 1)[0], screen


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_piped_output_is_complete_and_plain(ws: Workspace, args: tuple[str, ...]) -> None:
    done = ws.run(*args, check=False)
    assert done.returncode in (0, 3), done.stderr  # verify: SavedModel folders' stat differ
    out = done.stdout
    assert out, args
    assert "\x1b" not in out + done.stderr, out
    assert "…" not in out, out
    trailing = [line for line in out.splitlines() if line != line.rstrip()]
    assert not trailing, trailing
    if args[0] == "history":
        assert "┤" not in out, out  # no chart into a pipe
    if args[0] in ("list", "log", "verify", "history"):
        assert f"{LONG_RUN}/epoch_001.keras" in out, out  # whole, never cut


DOCS = Path(__file__).resolve().parents[2] / "docs"
CONTRACT_PAGE = DOCS / "cli-contract.md"
RUNS_PAGE = DOCS / "runs.md"


def test_the_docs_list_example_is_what_ckpt_prints(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """docs/cli-contract.md's `ckpt list --run exp1` / `ckpt runs` block, run on those files."""
    run = workspace.root / "exp1"
    run.mkdir()
    for source in (keras_checkpoints / ZIP_RUN).iterdir():
        shutil.copy2(source, run / source.name)  # the three epochs and their training.log
    workspace.run("scan")
    block = CONTRACT_PAGE.read_text().split("```text\n$ ckpt list --run exp1\n", 1)[1]
    listed, runs = block.split("```", 1)[0].split("$ ckpt runs\n")
    assert workspace.run("list", "--run", "exp1").stdout == listed
    assert workspace.run("runs").stdout == runs
