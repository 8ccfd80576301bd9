"""Every command the documentation shows runs, and none crashes (issue 41, item 3: `ckpt web`,
the README's tour and its own --help example, ended in `unexpected error: KeyError`).

`support/documented_commands.py` collects them: README.md and docs/*.md (shell blocks, inline
`ckpt ...` that are commands) and every --help's `Example:`. Each runs as the user would type
it, in a workspace whose runs have the names the pages use (`exp1`, `exp2`, `demo`, `job`;
`weights.07-0.23.hdf5`, `e03.keras`, ...: real Keras and tf-keras checkpoints), with an S3
store on loopback for the object-storage commands. A command may fail as documented (exit 2, 3,
4, 5, 6: a synopsis' placeholder, a file an earlier command trashed), never as a crash: exit 1,
"unexpected error", a traceback or a signal. The long-running ones are stopped once they do
their job: `ckpt serve` once ready, `ckpt web` once it served the overview; `ckpt wait` answers
a save made while it waits. The programs beside `ckpt` (pip, systemctl, ...) are not run: each is
in `NOT_RUN` with why. Commands that change the workspace's files (prune, tier, trash purge,
restore) run after the others, so that the others see every file."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import documented_commands as docs
from tests.support.forked_cli import ckpt_process, ckpt_start
from tests.support.s3_server import CREDENTIALS, S3Server
from tests.support.workspace import ZIP_FILES, ZIP_RUN, Workspace, rewritten_best

GENEROUS_S = 60.0  # a loaded 2-core machine
took: dict[str, float] = {}  # seconds per command run (printed by the test: the slowest)
served: list[str] = []  # the `ckpt web` commands whose overview page was fetched
woke: dict[str, str] = {}  # the `ckpt wait` commands that answered a new save: what they said
# Exits a documented command may end with: ok, usage/config, partial, lease, schema, not found.
DOCUMENTED_EXITS = {0, 2, 3, 4, 5, 6}
# Paths the pages show on a server, mapped into the workspace (names from docs/service.md).
LONG_RUNNING = ("serve", "web", "wait")
CHANGES_FILES = ("prune", "tier", "purge", "restore", "fetch", "compress", "unpin", "pin")
EXP1 = {  # the names the pages and --help examples use -> (fixture, from k3/run_zip or tf-keras)
    "weights.03-0.41.hdf5": "tfk/run_h5/weights.01-1.69.hdf5",
    "weights.04-0.52.hdf5": "tfk/run_h5/weights.02-1.68.hdf5",
    "weights.07-0.23.hdf5": "tfk/run_h5/weights.01-1.69.hdf5",
    "e03.keras": f"{ZIP_RUN}/{ZIP_FILES[0]}",
    "e04.keras": f"{ZIP_RUN}/{ZIP_FILES[1]}",
    "e07.keras": f"{ZIP_RUN}/{ZIP_FILES[2]}",
    "e03-vl1.643.keras": f"{ZIP_RUN}/{ZIP_FILES[2]}",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


def documented_workspace(base: Path, fixtures: Path, s3: S3Server) -> Workspace:
    ws = Workspace(base)
    s3.bucket("ckpt-docs")
    ws.config.write_text(
        ws.config.read_text()
        + f"remote:\n  url: s3://ckpt-docs/team\n  endpoint_url: {s3.url}\n"
        + "  region: us-east-1\n"
    )
    exp1 = ws.root / "exp1"
    exp1.mkdir()
    for name, source in EXP1.items():
        shutil.copy2(fixtures / source, exp1 / name)
    log = ["epoch,accuracy,loss,val_accuracy,val_loss"]  # Keras CSVLogger: 0-based epochs
    log += [
        f"{e},{0.5 + e / 20:.3f},{1.1 - e / 10:.3f},{0.3 + e / 20:.3f},{1.2 - e / 9:.3f}"
        for e in range(8)
    ]
    (exp1 / "training.log").write_text("\n".join(log) + "\n")
    for run in ("exp2", "demo"):
        shutil.copytree(fixtures / ZIP_RUN, ws.root / run)
    ws.run("scan")
    rewritten_best(ws, fixtures)  # runs/job/best.keras, rewritten in place: its versions kept
    (base / "textfile").mkdir()
    (base / "home").mkdir()
    return ws


def environment(ws: Workspace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CKPT_", "XDG_"))}
    env.update(CREDENTIALS)
    env.pop("AWS_PROFILE", None)
    # Nothing of the user's: serve remembers its config under this HOME; --open runs `true`.
    env.update(HOME=str(ws.base / "home"), BROWSER="true", COLUMNS="100")
    return env


def localized(words: list[str], ws: Workspace) -> list[str]:
    """The server paths and fixed ports the pages show, mapped into the workspace."""
    mapped = {
        "/etc/ckpt/config.yaml": str(ws.config),
        "/var/lib/node_exporter/textfile/ckpt.prom": str(ws.base / "textfile" / "ckpt.prom"),
        "127.0.0.1:8080": "127.0.0.1:0",  # another process may hold 8080: any free port
    }
    return [mapped.get(w, w) for w in words]


def crashed(code: int | None, said: str) -> bool:
    """An end no documentation promises: a signal, exit 1 without the one-line error of a
    catalog that cannot be reached ("ckpt: error: cannot connect ..."), "unexpected error",
    a traceback, or an exit code outside the documented table."""
    if code is None or "ckpt: unexpected error" in said or "Traceback (most recent" in said:
        return True
    if code == 1:
        return "ckpt: error: cannot connect to the" not in said
    return code not in DOCUMENTED_EXITS


def _output_of(output: Path) -> str:
    return output.read_text(encoding="utf-8", errors="replace")


def _until(condition: object, proc: object, seconds: float = GENEROUS_S) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        if proc.poll() is not None:  # type: ignore[attr-defined]
            return False
        time.sleep(0.05)
    return False


def _waiting(pid: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        return "anon_inode:inotify" in {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}
    except OSError:
        return False


def run_long(argv: list[str], ws: Workspace, env: dict[str, str]) -> tuple[int | None, str]:
    """A long-running command, stopped once it has done its job (see the module's doc)."""
    command = next(w for w in argv[1:] if not w.startswith("-") and w not in (str(ws.config),))
    with tempfile.NamedTemporaryFile(dir=ws.base, suffix=".out") as out:
        output = Path(out.name)
        proc = ckpt_start(argv[1:], output=out.fileno(), env=env, cwd=ws.base)
        try:
            if command == "serve":
                if _until(lambda: "event=ready" in _output_of(output), proc):
                    proc.send_signal(signal.SIGTERM)
            elif command == "web":
                urls = re.compile(r"ckpt web: (http://\S+/) ")
                if _until(lambda: urls.search(_output_of(output)), proc):
                    url = urls.search(_output_of(output))[1]  # type: ignore[index]
                    with urllib.request.urlopen(url, timeout=GENEROUS_S) as page:
                        status, html = page.status, page.read().decode()
                    assert status == 200 and "<html" in html.lower(), (status, html[:500])
                    assert "exp1" in html and "demo" in html, html[:500]  # the runs overview
                    served.append(" ".join(argv))
                    proc.send_signal(signal.SIGINT)
            elif _until(lambda: _waiting(proc.pid), proc) and "--run" in argv:
                # wait: a new checkpoint of its run saved and scanned: it answers with it.
                run = argv[argv.index("--run") + 1]
                new = ws.root / run / f"e{10 + len(woke):02d}.keras"
                shutil.copy2(ws.root / "demo" / ZIP_FILES[2], new)
                new.touch()
                ckpt_process(["scan"], env=env, cwd=ws.base, timeout=GENEROUS_S)
                if proc.wait(timeout=GENEROUS_S) == 0:
                    woke[" ".join(argv)] = _output_of(output).strip().splitlines()[-1]
            code = proc.wait(timeout=GENEROUS_S)
        finally:
            proc.kill()
            proc.wait()
        said = _output_of(output)
    return code, said


def run_shown(
    shown: docs.Shown, ws: Workspace, env: dict[str, str], done: set[tuple[str, ...]]
) -> list[str]:
    """Run the `ckpt` commands of one shown line; the problems found (empty: none)."""
    problems: list[str] = []

    def one(argv: list[str]) -> str:
        argv = localized(argv, ws)
        if argv[1:3] == ["--config", str(ws.config)]:
            argv = [argv[0], *argv[3:]]  # the config the workspace's folder has anyway
        if tuple(argv) in docs.CKPT_NOT_RUN:
            return ""
        if tuple(argv) in done:
            return ""
        done.add(tuple(argv))
        command = next((w for w in argv[1:] if not w.startswith("-") and w != str(ws.config)), "")
        long = command in LONG_RUNNING and "--once" not in argv and "--help" not in argv
        if long:
            started = time.monotonic()
            code, said = run_long(argv, ws, env)
            out = ""
            took[" ".join(argv)] = time.monotonic() - started
        else:
            started = time.monotonic()
            try:
                result = ckpt_process(argv[1:], env=env, cwd=ws.base, timeout=GENEROUS_S)
            except subprocess.TimeoutExpired:
                problems.append(f"{shown.where}: `{' '.join(argv)}` still ran after {GENEROUS_S}s")
                return ""
            code, said, out = result.returncode, result.stdout + result.stderr, result.stdout
            took[" ".join(argv)] = time.monotonic() - started
        if crashed(code, said):
            problems.append(f"{shown.where}: `{' '.join(argv)}` exited {code}:\n{said[-800:]}")
        return out.strip().splitlines()[0] if out.strip() else ""

    if shown.inline:
        argv = docs.inline_argv(shown.text)
        if argv is not None and docs.is_ckpt_command(argv):
            one(argv)
        return problems
    text = re.sub(r"\$[a-z_][a-z0-9_]*", "", shown.text)  # a shell variable not set yet: empty
    outputs = {}
    for inner in docs.substitutions(text):
        if "..." not in inner:
            outputs[inner] = one(shlex.split(inner))
    line = docs.substitute(text, outputs)
    for words in docs.commands(line):
        if words[0] == "ckpt":
            if docs.is_ckpt_command(words):
                one(words)
        elif words[0] not in docs.NOT_RUN:
            problems.append(f"{shown.where}: `{words[0]}` is neither run nor in NOT_RUN: {line}")
    return problems


def order(shown: list[docs.Shown]) -> list[docs.Shown]:
    """The lines that change files last (stable: each group in the pages' order)."""

    def changes(s: docs.Shown) -> bool:
        words = s.text.replace('"', " ").split()
        return "--dry-run" not in words and any(w in CHANGES_FILES for w in words)

    return sorted(shown, key=changes)


def test_every_documented_command_runs_without_a_crash(
    tmp_path: Path, keras_checkpoints: Path, s3: S3Server
) -> None:
    ws = documented_workspace(tmp_path, keras_checkpoints, s3)
    env = environment(ws)
    shown = [*docs.from_pages(), *docs.from_help()]
    ran: set[tuple[str, ...]] = set()
    problems = [p for s in order(shown) for p in run_shown(s, ws, env, ran)]
    assert not problems, "\n\n".join(problems)
    # What was run covers every command and the pages' long-running ones.
    from ckpt_daemon.cli.main import all_commands

    names = {name.split()[0] for name, _command in all_commands()}
    ran_names = {w for argv in ran for w in argv[1:3] if w in names}
    assert names - ran_names == set(), sorted(names - ran_names)
    assert ("ckpt", "web", "--open") in ran and ("ckpt", "serve") in ran
    # `ckpt web --listen 127.0.0.1:PORT` served the overview (plain `ckpt web` too, unless
    # another process holds its default port 9465: then it says so, exit 2).
    assert "ckpt web --listen 127.0.0.1:0" in served, served
    # The loop of `ckpt wait --help` waits on its first turn (its "$ck" still empty) and
    # answers the next save (it used to exit 6 at once: "no checkpoint ''", ending the loop).
    said = woke.get("ckpt wait --run exp1 --after  --timeout 2h")
    assert said == str(ws.root / "exp1" / "e10.keras"), woke
    # The remembered config went to the workspace's HOME, never the user's.
    remembered = ws.base / "home" / ".local" / "state" / "ckpt" / "serve-config"
    assert remembered.read_text().strip() == str(ws.config)


def test_a_crashing_command_is_reported(tmp_path: Path) -> None:
    """The check can fail: a crash is told from a documented end, and a page that shows a
    program this test neither runs nor names in NOT_RUN is reported."""
    ws = Workspace(tmp_path)
    (tmp_path / "home").mkdir()
    ws.run("scan")
    env = environment(ws)
    assert run_shown(docs.Shown("t.md", "ckpt list --run x"), ws, env, set()) == []
    unknown = run_shown(docs.Shown("t.md", "frobnicate --all && ckpt status"), ws, env, set())
    assert len(unknown) == 1 and "`frobnicate` is neither run nor in NOT_RUN" in unknown[0]
    assert crashed(1, "ckpt: unexpected error: KeyError: '--listen'")
    assert crashed(1, "") and crashed(None, "") and crashed(-11, "")
    assert crashed(0, "Traceback (most recent call last):\n")
    assert not crashed(6, "ckpt: error: no checkpoint found")
    assert not crashed(0, "Exit codes: 0 ok, 1 unexpected error, 2 usage or config error")
    assert not crashed(1, "ckpt: error: cannot connect to the catalog (database c on h): ...")
