"""`ckpt` commands as real processes forked from one pre-imported interpreter (a zygote).

Every test of the CLI used to start a new Python for each command: 0.3 s of CPU to import the
CLI before `ckpt list` does anything, 0.9 s before `ckpt scan` (SQLAlchemy, Alembic), about
half of the suite's CPU on a 2-core machine. Here one zygote per test process imports the
package once (`ckpt_daemon` minus the child programs, TensorFlow and torch never), and each
command is a process forked from it: its own pid, its own stdin/stdout/stderr (the caller's pipe
ends, passed over a Unix socket), working folder, environment and exit status, running
`ckpt_daemon.cli.main.main` as `python -m ckpt_daemon` does. What a fork cannot show stays on
fresh interpreters: what a command imports, how fast it starts, the console script and the
wheel (test_cli, test_packaging, bench/), the daemon's own start-up under systemd's filter.

Each command gets two processes: a waiter forked by the zygote, which forks the command, sends
its pid, waits for it and sends how it ended (an exit code, or minus the signal that killed it).
The zygote itself never waits, so commands run side by side (the race tests start several at
once). `CKPT_TEST_FRESH_CLI=1` runs every command in a fresh interpreter instead. The same
server (zygote_server.py), given a module list instead of "cli", forks the suite's TensorFlow
programs (forked_python.py).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FRESH = bool(os.environ.get("CKPT_TEST_FRESH_CLI"))
_HEADER = struct.Struct("!I")


def ckpt_process(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    input: str | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """`python -m ckpt_daemon ARGS` to its end, output captured (as text, or bytes with
    `text=False`), like `subprocess.run(..., capture_output=True, text=True)`; raises
    `subprocess.TimeoutExpired` after `timeout` seconds (the command killed). `env`: the whole
    environment (default: ours)."""
    environment = dict(os.environ if env is None else env)
    folder = str(cwd if cwd is not None else os.getcwd())
    if FRESH or _read_at_start(environment) != _zygote().read_at_start:
        return subprocess.run(
            [sys.executable, "-m", "ckpt_daemon", *args],
            capture_output=True,
            text=text,
            env=environment,
            cwd=folder,
            timeout=timeout,
            input=input,
        )
    done: subprocess.CompletedProcess[Any] = _zygote().run(
        list(args), environment, folder, timeout, input
    )
    if text:
        done.stdout, done.stderr = _text(done.stdout), _text(done.stderr)
    return done


def ckpt_start(
    args: Sequence[str],
    *,
    output: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> ForkedProcess | subprocess.Popen[bytes]:
    """`python -m ckpt_daemon ARGS` started (a daemon: `serve`, `web`), stdin from /dev/null,
    stdout and stderr into the file descriptor `output`; a handle with Popen's pid, poll, wait,
    send_signal, terminate and kill."""
    environment = dict(os.environ if env is None else env)
    folder = str(cwd if cwd is not None else os.getcwd())
    if FRESH or _read_at_start(environment) != _zygote().read_at_start:
        return subprocess.Popen(
            [sys.executable, "-m", "ckpt_daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            env=environment,
            cwd=folder,
        )
    return _zygote().start(list(args), environment, folder, output)


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    """What an interpreter reads of its environment once, as it starts (sys.path from
    PYTHONPATH, the flags, the locale of its std streams): a command asked with other values
    than the zygote started with runs in a fresh interpreter, as a test that shadows a module
    through PYTHONPATH needs."""
    return {
        k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k in ("LANG", "LANGUAGE")
    }


class ForkedProcess:
    """A command forked by the zygote, as much of `subprocess.Popen` as the tests use: its
    waiter reports how it ended (an exit code, or minus the signal that ended it)."""

    def __init__(self, args: list[str], pid: int, reports: socket.socket, read: bytes) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._reports = reports
        self._read = read

    def poll(self) -> int | None:
        return self._wait_for(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait_for(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _wait_for(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if self._read.endswith(b"\n"):
                self.returncode = int(self._read)
                self._reports.close()
                break
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._reports], [], [], left)
            if not ready:
                return None
            data = self._reports.recv(64)
            if not data:
                self._reports.close()
                raise RuntimeError(f"the CLI zygote lost {self.args!r} (pid {self.pid})")
            self._read += data
        return self.returncode


class _Zygote:
    """The server; `program`: "cli" (the package imported, each request a `ckpt` command), or
    a comma-separated list of modules to import first, each request a Python script or `-c`
    program (tests/support/forked_python.py); `env`: its environment."""

    def __init__(self, program: str = "cli", env: Mapping[str, str] | None = None) -> None:
        self._folder = tempfile.mkdtemp(prefix="ckpt-zygote-")
        self.address = os.path.join(self._folder, "socket")
        self.read_at_start = _read_at_start(os.environ if env is None else env)
        self.cli = program == "cli"
        if env is None:
            env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.address, str(REPO), program],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.address):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the zygote did not start (exit {self._proc.poll()})")
            time.sleep(0.01)
        atexit.register(self.stop)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.wait()
        for name in os.listdir(self._folder):
            os.unlink(os.path.join(self._folder, name))
        os.rmdir(self._folder)

    def _send(
        self, args: list[str], env: dict[str, str], cwd: str, fds: list[int], session: bool = False
    ) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.address)
            asked = {"args": args, "env": env, "cwd": cwd, "session": session}
            request = json.dumps(asked).encode()
            socket.send_fds(conn, [_HEADER.pack(len(request)) + request], fds)
        except BaseException:
            conn.close()
            raise
        return conn

    def start(self, args: list[str], env: dict[str, str], cwd: str, output: int) -> ForkedProcess:
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            return self.start_with(args, env, cwd, [stdin, output, output])
        finally:
            os.close(stdin)

    def start_with(
        self, args: list[str], env: dict[str, str], cwd: str, fds: list[int], session: bool = False
    ) -> ForkedProcess:
        """A process forked for `args` with these stdin, stdout, stderr (ours stay open);
        `session`: in a new session and process group of its own (its pid the group's id)."""
        argv = [sys.executable, "-m", "ckpt_daemon", *args] if self.cli else [sys.executable, *args]
        conn = self._send(args, env, cwd, fds, session)
        received = b""
        while b"\n" not in received:  # the pid's line; the status may follow in the same read
            data = conn.recv(64)
            if not data:
                conn.close()
                raise RuntimeError(f"the CLI zygote did not start {argv!r}")
            received += data
        pid, rest = received.split(b"\n", 1)
        return ForkedProcess(argv, int(pid), conn, rest)

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: str,
        timeout: float | None,
        text_input: str | None,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "ckpt_daemon", *args] if self.cli else [sys.executable, *args]
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            conn = self._send(args, env, cwd, [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        replies = conn.makefile("rb")
        try:
            pid = int(replies.readline())
            out, err = _collect(in_w, text_input, out_r, err_r, pid, timeout, argv)
            status = replies.readline()
        finally:
            replies.close()
            conn.close()
        if not status:
            raise RuntimeError(f"the CLI zygote lost {argv!r} (pid {pid})")
        return subprocess.CompletedProcess(argv, int(status), out, err)


def _collect(
    in_w: int,
    text_input: str | None,
    out_r: int,
    err_r: int,
    pid: int,
    timeout: float | None,
    argv: list[str],
) -> tuple[bytes, bytes]:
    """The command's stdout and stderr until both close; its stdin fed `text_input` (or closed
    at once). Past `timeout`, the command is killed and TimeoutExpired raised."""
    pending = (text_input or "").encode()
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(out_r, selectors.EVENT_READ)
        selector.register(err_r, selectors.EVENT_READ)
        if pending:
            os.set_blocking(in_w, False)
            selector.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
        try:
            while len(selector.get_map()) > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    _kill(pid)
                    raise subprocess.TimeoutExpired(argv, timeout or 0)
                for key, _ in selector.select(left):
                    fd = key.fd
                    if fd == in_w:
                        try:
                            pending = pending[os.write(in_w, pending[:65536]) :]
                        except BrokenPipeError:
                            pending = b""
                        if not pending:
                            selector.unregister(in_w)
                            os.close(in_w)
                        continue
                    data = os.read(fd, 65536)
                    if data:
                        chunks[fd].append(data)
                    else:
                        selector.unregister(fd)
        finally:
            for fd in (out_r, err_r, *([in_w] if pending else [])):
                os.close(fd)
    return (b"".join(chunks[out_r]), b"".join(chunks[err_r]))


def _text(data: bytes) -> str:
    # As subprocess's text mode reads it: the locale's encoding, universal newlines.
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


_ZYGOTES: dict[int, _Zygote] = {}


def _zygote() -> _Zygote:
    # One per test process (a process forked from a test starts its own).
    pid = os.getpid()
    if pid not in _ZYGOTES:
        _ZYGOTES[pid] = _Zygote()
    return _ZYGOTES[pid]


class ForkedCommands:
    """The bench campaigns' `Launcher` (bench/_common.py), each command forked from the CLI
    zygote started with the command's environment, for their small runs in the suite
    (test_crash_campaign and the like): the same commands, kills and checks, without an
    interpreter start each. `CKPT_TEST_FRESH_CLI=1`: fresh interpreters, as the bench runs."""

    def run(
        self, args: Sequence[str], *, env: dict[str, str], cwd: Path | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        folder = str(cwd if cwd is not None else os.getcwd())
        if FRESH:
            return subprocess.run(
                [sys.executable, "-m", "ckpt_daemon", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=folder,
                stdin=subprocess.DEVNULL,
            )
        done: subprocess.CompletedProcess[Any] = cli_zygote_for(env).run(
            list(args), dict(env), folder, timeout, None
        )
        done.stdout, done.stderr = _text(done.stdout), _text(done.stderr)
        return done

    def start(
        self, args: Sequence[str], *, env: dict[str, str], cwd: Path | None, stderr: int
    ) -> ForkedProcess | subprocess.Popen[bytes]:
        folder = str(cwd if cwd is not None else os.getcwd())
        if FRESH:
            return subprocess.Popen(
                [sys.executable, "-m", "ckpt_daemon", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                cwd=folder,
                start_new_session=True,
            )
        stdin, stdout = os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY)
        try:
            return cli_zygote_for(env).start_with(
                list(args), dict(env), folder, [stdin, stdout, stderr], session=True
            )
        finally:
            os.close(stdin)
            os.close(stdout)


_STARTED_WITH: dict[tuple[int, tuple[tuple[str, str], ...]], _Zygote] = {}


def cli_zygote_for(env: Mapping[str, str]) -> _Zygote:
    """The CLI zygote of this test process whose interpreter started with what `env` sets at
    start (PYTHONPATH, flags, locale): ours, or one started with `env` the first time it is
    asked for (the bench's campaigns run their commands with PYTHONPATH=<repository>)."""
    key = tuple(sorted(_read_at_start(env).items()))
    if dict(key) == _zygote().read_at_start:
        return _zygote()
    slot = (os.getpid(), key)
    if slot not in _STARTED_WITH:
        _STARTED_WITH[slot] = _Zygote(env={**env, "OMP_NUM_THREADS": "1"})
    return _STARTED_WITH[slot]


# The zygote's program (tests/support/zygote_server.py), run with -c.
_SERVER = (Path(__file__).with_name("zygote_server.py")).read_text()
