"""Issue 8, items 16, 23, 24, 25: what the CLI prints is true and safe to print, and hostile
config or command-line input gets one line and its exit code, never "unexpected error".

Everything runs as users run it: `ckpt` subprocesses, a real SQLite catalog, real Keras files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace
from tests.support.forked_cli import ckpt_process

pytestmark = pytest.mark.slow

# C0 controls but the newline that ends our own lines, DEL and C1 controls: none may be printed.
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def run(ws: Workspace, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
    """`ckpt ARGS` with its output as it was written: `Workspace.run` decodes in text mode,
    which turns a raw CR into a newline and would hide it."""
    done = ckpt_process(["--config", str(ws.config), *args], timeout=300, cwd=ws.base, text=False)
    result = subprocess.CompletedProcess(
        args, done.returncode, _decode(done.stdout), _decode(done.stderr)
    )
    if code is not None:
        assert done.returncode == code, (args, done.returncode, result.stdout, result.stderr)
    return result


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def assert_printable(text: str, what: str) -> None:
    found = RAW_CONTROL.search(text)
    assert found is None, f"{what}: raw {found.group()!r} in output:\n{text!r}"


# ---- item 16: names are data, never markup or terminal control ----

# A run folder whose name holds rich's closing tag, an ANSI colour sequence, CR, TAB and a C1
# CSI; a run whose name is markup; a file name with markup, an emoji code and a newline.
ODD_RUN = "a[/]b\x1b[31mred\r\t\x9bq"
ODD_RUN_SHOWN = r"a[/]b\x1b[31mred\r\t\x9bq"
MARKUP_RUN = "[red]x[/red]"
NAMING_ODD_RUN = ("list", "runs", "log", "show", "best", "pin", "unpin", "verify")
ODD_FILE = "[bold]:smile:\nz.keras"
ODD_FILE_SHOWN = r"[bold]:smile:\nz.keras"
BROKEN = "broken\x1b[2J.keras"
BROKEN_SHOWN = r"broken\x1b[2J.keras"


@pytest.fixture
def odd_names(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    source = keras_checkpoints / ZIP_RUN
    (workspace.root / ODD_RUN).mkdir(parents=True)
    (workspace.root / MARKUP_RUN).mkdir(parents=True)
    # e{epoch:02d}-vl{val_loss:.3f}.keras: the odd run holds the best val_loss of the catalog.
    shutil.copy2(source / ZIP_FILES[0], workspace.root / ODD_RUN / "e01-vl0.100.keras")
    shutil.copy2(source / ZIP_FILES[1], workspace.root / MARKUP_RUN / "e02-vl0.200.keras")
    shutil.copy2(source / ZIP_FILES[2], workspace.root / MARKUP_RUN / ODD_FILE)
    data = (source / ZIP_FILES[2]).read_bytes()
    (workspace.root / MARKUP_RUN / BROKEN).write_bytes(data[: len(data) // 2])
    return workspace


def test_hostile_names_are_printed_escaped_and_json_keeps_the_real_path(
    odd_names: Workspace,
) -> None:
    ws = odd_names
    odd_path = str(ws.root / ODD_RUN / "e01-vl0.100.keras")
    odd_file = str(ws.root / MARKUP_RUN / ODD_FILE)

    served = run(ws, "serve", "--once", code=None)  # its structured log names every file
    assert served.returncode in (0, 3), served.stderr
    assert_printable(served.stderr, "serve --once log")
    # logfmt quotes a value holding a backslash and doubles it: `\x1b` is logged as `\\x1b`.
    for name in (ODD_RUN_SHOWN, BROKEN_SHOWN):
        assert name.replace("\\", "\\\\") in served.stderr, served.stderr

    scanned = run(ws, "scan", code=3)  # exit 3: the truncated file is corrupt
    assert_printable(scanned.stdout + scanned.stderr, "scan")
    assert BROKEN_SHOWN in scanned.stderr

    rows = {r["path"]: r for r in ws.json("list")}
    assert odd_path in rows and odd_file in rows  # JSON: the exact names, control chars and all
    odd_id = str(rows[odd_path]["id"])
    assert ws.json("best", "--metric", "val_loss")["path"] == odd_path
    assert ws.json("show", odd_id)["run"] == ODD_RUN

    pruned = run(ws, "prune", "--run", MARKUP_RUN, "--keep-last", "1")
    assert_printable(pruned.stdout + pruned.stderr, "prune")
    shown: dict[tuple[str, ...], str] = {}
    for args in [
        ("list",),
        ("list", "--status", "corrupt"),
        ("runs",),
        ("log",),
        ("show", odd_id),
        ("show", odd_path),
        ("best", "--metric", "val_loss"),
        ("pin", odd_id),
        ("unpin", odd_id),
        ("trash", "list"),
        ("prune", "--keep-last", "1", "--dry-run"),
        ("verify", odd_id),
    ]:
        done = run(ws, *args)  # exit 0: a name is never markup to choke on
        assert_printable(done.stdout + done.stderr, " ".join(args))
        shown[args] = done.stdout
    for args in [a for a in shown if a[0] in NAMING_ODD_RUN and a[1:2] != ("--status",)]:
        assert ODD_RUN_SHOWN in shown[args], (args, shown[args])
    assert MARKUP_RUN in shown[("list",)] and MARKUP_RUN in shown[("runs",)]
    assert BROKEN_SHOWN in shown[("list", "--status", "corrupt")]
    assert ODD_FILE_SHOWN in shown[("trash", "list")] + shown[("list",)]
    best_line = shown[("best", "--metric", "val_loss")]
    assert best_line == f"{ws.root}/{ODD_RUN_SHOWN}/e01-vl0.100.keras\n"
    missing = run(ws, "show", str(ws.root / "\x1b[2Jnope"), code=6)
    assert_printable(missing.stderr, "error line")


def test_scan_progress_on_a_terminal_shows_names_as_data(odd_names: Workspace) -> None:
    """`ckpt scan` draws a live bar with the current path, and streams its lines above it,
    when stdout is a terminal."""
    import pty
    import threading

    master, terminal = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(odd_names.config), "scan"]
    try:
        done = subprocess.run(
            cmd, stdout=terminal, stderr=subprocess.PIPE, timeout=300, cwd=odd_names.base
        )
    finally:
        os.close(terminal)
    reader.join(30)
    os.close(master)
    assert done.returncode == 3  # the truncated file
    drawn = b"".join(chunks)
    assert b"checked" in drawn, drawn  # the counter was drawn
    assert rb"indexed     [red]x[/red]/" in drawn, drawn  # a streamed line, as typed
    # Whichever name was drawn last, it came as typed: no colour from `[red]` or from the ESC
    # in a name, no bold from `[bold]`, no emoji for `:smile:`, no screen clear.
    for sequence in (
        b"\x1b[31m",
        b"\x1b[1m",
        b"\x1b[2J",
        "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}".encode(),
    ):
        assert sequence not in drawn, (sequence, drawn)


# ---- item 23: a non-finite metric is null everywhere and never the best ----

TRAINING_LOG = """epoch,loss,val_auc,val_loss
0,0.9,0.6,0.9
1,-inf,-inf,inf
2,0.7,0.5,0.7
"""


@pytest.fixture
def diverged(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    run = workspace.root / "exp"
    run.mkdir()
    for epoch, name in enumerate(ZIP_FILES, start=1):
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, run / f"epoch_{epoch:03d}.keras")
    (run / "training.log").write_text(TRAINING_LOG)
    workspace.run("scan")
    return workspace


def test_non_finite_metrics_are_null_in_text_and_json_and_never_best(diverged: Workspace) -> None:
    ws = diverged
    by_epoch = {r["epoch"]: r for r in ws.json("list")}
    assert by_epoch[1]["metrics"] == {"loss": 0.9, "val_auc": 0.6, "val_loss": 0.9}
    assert by_epoch[2]["metrics"] == {"loss": None, "val_auc": None, "val_loss": None}
    second = str(by_epoch[2]["id"])
    assert ws.json("show", second)["metrics"] == by_epoch[2]["metrics"]

    listing = ws.run("list").stdout.splitlines()
    row = next(line for line in listing if "epoch_002" in line)
    # Metrics are the last columns (one per name); this row's cells under them say null.
    assert listing[0].split()[-3:] == ["val_auc", "loss", "val_loss"], listing
    assert row.split()[-3:] == ["null", "null", "null"], row
    assert not any("inf" in line for line in listing), listing
    shown = [line for line in ws.run("show", second).stdout.splitlines() if "metric " in line]
    assert "  metric val_loss = null (csv:exp/training.log)" in shown, shown  # root-relative
    assert not any("inf" in line for line in shown), shown

    path = {epoch: row["path"] for epoch, row in by_epoch.items()}
    for args, epoch in (
        (("--metric", "val_loss", "--mode", "max"), 1),  # not epoch 2's +inf
        (("--metric", "val_loss"), 3),
        (("--metric", "val_auc", "--mode", "min"), 3),  # not epoch 2's -inf
        (("--metric", "loss"), 3),  # min by default: not epoch 2's -inf
    ):
        assert ws.run("best", *args).stdout.strip() == path[epoch], args
        assert ws.json("best", *args)["path"] == path[epoch], args
    assert ws.json("runs")[0]["best"] == {"loss": path[3], "val_auc": path[1], "val_loss": path[3]}
    assert [r["epoch"] for r in ws.json("list", "--where", "val_loss > 0.8")] == [1]
    plan = ws.json("prune", "--keep-best", "1", "--metric", "val_loss", "--mode", "max", "-n")
    reasons = {d["path"]: " ".join(d["reasons"]) for d in plan["runs"][0]["decisions"]}
    assert "best val_loss #1" in reasons[path[1]], reasons
    assert "best val_loss #1" not in reasons[path[2]], reasons


# ---- item 24: one validation for `config check` and `serve`, refusing what cannot work ----


STATE = "state_dir: {base}/state\n"
ROOT = "roots: [{path: {base}/runs}]\n"
HUGE_DAYS = "99999999999999d"
MANY_DIGITS = "9" * 400
# (id, config text with {base} for the test's folder, the key the error must name)
CONFIG_CASES = [
    (
        "purge_after-huge",
        STATE + ROOT + "trash: {purge_after: " + HUGE_DAYS + "}\n",
        "trash.purge_after",
    ),
    ("heartbeat-inf", STATE + ROOT + "service: {heartbeat: .inf}\n", "service.heartbeat"),
    ("heartbeat-nan", STATE + ROOT + "service: {heartbeat: .nan}\n", "service.heartbeat"),
    ("heartbeat-days", STATE + ROOT + "service: {heartbeat: 30d}\n", "service.heartbeat"),
    ("heartbeat-1ms", STATE + ROOT + "service: {heartbeat: 1ms}\n", "service.heartbeat"),
    (
        "settle-nan",
        STATE + ROOT + "completion: {settle_seconds: .nan}\n",
        "completion.settle_seconds",
    ),
    ("rescan-inf", STATE + ROOT + "schedule: {rescan: .inf}\n", "schedule.rescan"),
    (
        "misfire-huge",
        STATE + ROOT + "schedule: {misfire_grace: " + HUGE_DAYS + "}\n",
        "schedule.misfire_grace",
    ),
    (
        "keep_within-huge",
        STATE + ROOT + "retention: {keep_within: " + HUGE_DAYS + "}\n",
        "retention.keep_within",
    ),
    (
        "keep_within-digits",
        STATE + ROOT + "retention: {keep_within: '" + MANY_DIGITS + "s'}\n",
        "retention.keep_within",
    ),
    (
        "max_bytes-huge",
        STATE + ROOT + "retention: {keep_last: 1, max_bytes: 99999999999999999999999}\n",
        "retention.max_bytes",
    ),
    (
        "max_bytes-digits",
        STATE + ROOT + "retention: {keep_last: 1, max_bytes: '" + MANY_DIGITS + "PB'}\n",
        "retention.max_bytes",
    ),
    ("split_after-inf", STATE + ROOT + "artifacts: {split_after: .inf}\n", "artifacts.split_after"),
    (
        "poll-nan",
        STATE + "roots: [{path: {base}/runs, poll_interval: .nan}]\n",
        "roots[0].poll_interval",
    ),
    ("database-dialect", STATE + ROOT + "database: nosuchdialect://x\n", "database"),
    ("database-driver", STATE + ROOT + "database: mysql+nosuchdriver://h/x\n", "database"),
    ("database-memory", STATE + ROOT + "database: 'sqlite://'\n", "database"),
    (
        "misfire-sub-second",
        STATE + ROOT + "schedule: {misfire_grace: 0.5}\n",
        "schedule.misfire_grace",
    ),
    ("rescan-1ms", STATE + ROOT + "schedule: {rescan: 1ms}\n", "schedule.rescan"),
    (
        "poll-1us",
        STATE + "roots: [{path: {base}/runs, poll_interval: 0.000001}]\n",
        "roots[0].poll_interval",
    ),
    ("root-nul", STATE + 'roots: [{path: "{base}/runs\\0x"}]\n', "roots[0].path"),
    ("state-nul", 'state_dir: "{base}/st\\0"\n' + ROOT, "state_dir"),
    ("database-nul", STATE + ROOT + 'database: "sqlite:///{base}/x\\0.db"\n', "database"),
    ("root-slash", STATE + "roots: [{path: /}]\n", "roots[0].path"),
    ("root-missing", STATE + "roots: [{path: {base}/nowhere}]\n", "roots[0].path"),
    ("root-a-file", STATE + "roots: [{path: {base}/runs}, {path: {base}/f}]\n", "roots[1].path"),
    ("root-symlink-to-slash", STATE + "roots: [{path: {base}/slash}]\n", "roots[0].path"),
    ("root-is-state", "state_dir: {base}/runs\n" + ROOT, "roots[0].path"),
    ("state-in-root", "state_dir: {base}/runs/.state\n" + ROOT, "roots[0].path"),
    ("root-in-state", "state_dir: {base}\n" + ROOT, "roots[0].path"),
    ("state-via-symlink", "state_dir: {base}/link/state\n" + ROOT, "roots[0].path"),
    (
        "roots-same-via-symlink",
        STATE + "roots: [{path: {base}/runs}, {path: {base}/link}]\n",
        "roots[1].path",
    ),
    (
        "root-inside-via-symlink",
        STATE + "roots: [{path: {base}/runs}, {path: {base}/link/sub}]\n",
        "roots[1].path",
    ),
]


@pytest.mark.parametrize(
    ("text", "key"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_config_check_and_serve_refuse_the_same_bad_values(
    workspace: Workspace, text: str, key: str
) -> None:
    base = workspace.base
    (base / "runs" / "sub").mkdir(parents=True, exist_ok=True)
    (base / "link").symlink_to(base / "runs")
    (base / "slash").symlink_to("/")
    (base / "f").write_text("a file, not a folder\n")
    workspace.config.write_text(text.replace("{base}", str(base)))
    for args in (("config", "check"), ("serve", "--once")):
        done = workspace.run(*args, check=False)
        assert done.returncode == 2, (args, done.returncode, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ckpt: error: config: "), done.stderr
        assert f": {key}: " in lines[0], (key, lines[0])


# ---- item 25: hostile arguments get one line and their exit code ----


@pytest.fixture(scope="module")
def one_checkpoint(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Any:
    ws = Workspace(tmp_path_factory.mktemp("hostile"))
    run = ws.root / "exp"
    run.mkdir()
    shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[0], run / ZIP_FILES[0])
    ws.run("scan")
    return ws


HUGE = "99999999999999999999999"


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (("list", "--limit", HUGE), 2, "--limit"),
        (("log", "--limit", HUGE), 2, "--limit"),
        (("show", HUGE), 6, "no checkpoint"),
        (("show", "²"), 6, "no checkpoint"),
        (("show", "١"), 6, "no checkpoint"),  # an Arabic-Indic one is not catalog id 1
        (("pin", "²"), 6, "no checkpoint"),
        (("pin", HUGE), 6, "no checkpoint"),
        (("unpin", HUGE), 6, "no checkpoint"),
        (("split", HUGE), 6, "no checkpoint"),
        (("compress", "³"), 6, "no checkpoint"),
        (("verify", HUGE), 6, "no checkpoint"),
        (("trash", "restore", "²"), 6, "no checkpoint"),
        (("trash", "restore", HUGE), 6, "no checkpoint"),
        (("show", "bad\udcffname"), 2, "UTF-8"),
        (("list", "--run", "\udcff"), 2, "UTF-8"),
        (("list", "--where", "size > 5XB"), 2, "--where size"),
        (("list", "--where", f"size > {HUGE}PB"), 2, "--where size"),
        (("list", "--where", f"size > {MANY_DIGITS}"), 2, "--where size"),
        (("list", "--where", "val_loss < nan"), 2, "finite"),
        (("list", "--where", "val_loss < 1e999"), 2, "finite"),
        (("list", "--where", f"epoch > {MANY_DIGITS}"), 2, "finite"),
        (("--db", "nosuchdialect://x", "list"), 2, "nosuchdialect"),
        (("--db", "postgresql+nosuchdriver://h/x", "list"), 2, "nosuchdriver"),
        (("--db", "not a url", "list"), 2, "database"),
        (("--db", "sqlite:///{base}/nonexistent/dir/x.db", "list"), 2, "nonexistent"),
        (("--db", "sqlite:///{base}/config.yaml", "list"), 2, "not an SQLite catalog"),
        (("--db", "sqlite:///:memory:", "list"), 2, "in-memory"),
        (("--db", "sqlite:///{base}/x.db?timeout=abc", "list"), 2, "config: database: bad"),
        (("--db", "sqlite:///{base}/runs", "list"), 2, "cannot open"),
        (("--db", "nosuchdialect://x", "db", "current"), 2, "nosuchdialect"),
        (("--config", "", "list"), 2, "--config"),
        (("config", "check", ""), 2, "--config"),
        (("prune", "--keep-best", "1", "--metric", "", "-n"), 2, "--metric"),
        (("prune", "--keep-last", "1", "--keep-within", "", "-n"), 2, "--keep-within"),
        (("--db", "nosuchdialect://x", "serve", "--once"), 2, "nosuchdialect"),
        (("trash", "purge", "--older-than", "99999999999999d"), 2, "--older-than"),
        (("trash", "purge", "--older-than", f"{MANY_DIGITS}s"), 2, "--older-than"),
        (
            ("prune", "--keep-last", "1", "--keep-within", "99999999999999d", "-n"),
            2,
            "--keep-within",
        ),
        (("prune", "--keep-last", "1", "--max-bytes", f"{MANY_DIGITS}PB", "-n"), 2, "--max-bytes"),
        (("prune", "--keep-last", "1", "--max-bytes", f"{HUGE}PB", "-n"), 2, "--max-bytes"),
        (("list", "--nope\x1b[2J"), 2, r"\x1b[2J"),
    ],
)
def test_hostile_arguments_get_one_line_and_their_exit_code(
    one_checkpoint: Workspace, argv: tuple[str, ...], code: int, fragment: str
) -> None:
    ws = one_checkpoint
    argv = tuple(a.replace("{base}", str(ws.base)) for a in argv)
    done = ws.run(*argv, check=False)
    assert done.returncode == code, (argv, done.returncode, done.stdout, done.stderr)
    out = done.stdout if code == 0 else done.stderr
    assert fragment in out, (argv, out)
    assert "unexpected error" not in done.stderr and "Traceback" not in done.stderr
    assert_printable(done.stderr, " ".join(argv))
    if code != 0:
        errors = [line for line in done.stderr.splitlines() if "rror" in line]
        assert len(errors) == 1, done.stderr
    assert not (ws.base / "nonexistent").exists()


def test_a_hostile_temp_file_name_does_not_crash_the_service(workspace: Workspace) -> None:
    """Temp names carry the writer's pid; a name with a superscript or a huge "pid" must not
    crash the start-up clean-up (int('²') raises, os.kill(10**20, 0) overflows)."""
    for name in (".ckpt-tmp-²-x.h5", f".ckpt-tmp-{HUGE}-x.h5", ".ckpt-tmp-9999999999-x.h5"):
        (workspace.root / name).write_bytes(b"left over")
    done = workspace.run("serve", "--once", check=False)
    assert done.returncode == 0, done.stderr
    assert "unexpected error" not in done.stderr
