"""Test-side TensorFlow/Keras programs forked from one interpreter that has imported them.

The suite writes its real checkpoints in child programs (`python keras_fixtures.py --keras3
OUT`, trainings, `-c` probes that load a model): each used to start a new Python and import
TensorFlow and Keras, ~10 s of CPU before it did anything, some forty times a run on a 2-core
machine. Here one zygote per test process (`forked_cli._Zygote` with a module list) imports
`tensorflow`, `keras` and `tf_keras` once, and each program is a process forked from it: its own
pid, stdin/stdout/stderr, working folder, environment, exit status and fresh random seeds,
running the script (or `-c` code) as `python` would. TensorFlow reads some of its environment as
it is imported (`TF_CPP_MIN_LOG_LEVEL`, `KERAS_BACKEND`, `TF_USE_LEGACY_KERAS`): a program asked
with other such values gets a zygote of its own. `CKPT_TEST_FRESH_CLI=1` runs every program in a
fresh interpreter instead, and so does anything but `python SCRIPT` or `python -c CODE`.

Only the suite's own programs go through here; the daemon's children (the product's load
probes and readers) always start as the daemon starts them.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .forked_cli import FRESH, ForkedProcess, _read_at_start, _text, _Zygote

PRELOADED = "tensorflow,keras,tf_keras"
# What TensorFlow and Keras read of the environment once, at import.
_AT_IMPORT = ("TF_", "KERAS_", "CUDA_", "XLA_", "JAX_", "OMP_", "OPENBLAS_", "MKL_")


class ForkedPopen:
    """A program forked by a zygote, as much of `subprocess.Popen` as the suite's callers use:
    pid, args, returncode, poll, wait, communicate, send_signal, terminate and kill."""

    def __init__(self, process: ForkedProcess, pipes: dict[str, int], text: bool) -> None:
        self._process = process
        self._pipes = pipes  # "stdout"/"stderr": the reading end of that pipe
        self._text = text
        self.args = process.args
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout)

    def send_signal(self, number: int) -> None:
        self._process.send_signal(number)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """The program's piped output until the pipes close, then its exit; past `timeout`
        seconds, TimeoutExpired (the program left running, as Popen leaves it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {fd: [] for fd in self._pipes.values()}
        open_fds = list(chunks)
        while open_fds:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(open_fds, [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    chunks[fd].append(chunk)
                else:
                    open_fds.remove(fd)
                    os.close(fd)
        found: dict[str, Any] = {}
        for name, fd in self._pipes.items():
            raw = b"".join(chunks[fd])
            found[name] = _text(raw) if self._text else raw
        self._pipes = {}
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return found.get("stdout"), found.get("stderr")


def popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    text: bool = False,
) -> ForkedPopen | subprocess.Popen[Any]:
    """`subprocess.Popen(argv, env=, cwd=, stdout=, stderr=, text=)` for `[sys.executable,
    SCRIPT | -c CODE, ...]`, forked from the zygote. stdout: None (ours), PIPE, or a file
    descriptor; stderr: the same or STDOUT. stdin is /dev/null."""
    environment = dict(os.environ if env is None else env)
    folder = str(cwd if cwd is not None else os.getcwd())
    streams = _stream_ok(stdout) and (stderr == subprocess.STDOUT or _stream_ok(stderr))
    if not (_forkable(argv) and streams):
        return subprocess.Popen(
            list(argv),
            env=environment,
            cwd=folder,
            stdout=stdout,
            stderr=stderr,
            text=text,
            stdin=subprocess.DEVNULL,
        )
    pipes: dict[str, int] = {}
    ours: list[int] = []  # the writing ends, closed here once the program has its copies
    fds: list[int] = [os.open(os.devnull, os.O_RDONLY)]
    ours.append(fds[0])
    for name, asked, default in (("stdout", stdout, 1), ("stderr", stderr, 2)):
        if asked == subprocess.PIPE:
            read_end, write_end = os.pipe()
            pipes[name] = read_end
            ours.append(write_end)
            fds.append(write_end)
        elif asked == subprocess.STDOUT:
            fds.append(fds[1])
        else:
            fds.append(default if asked is None else int(asked))
    try:
        process = _zygote_for(environment).start_with(list(argv[1:]), environment, folder, fds)
    except BaseException:
        for fd in pipes.values():
            os.close(fd)
        raise
    finally:
        for fd in ours:
            os.close(fd)
    return ForkedPopen(process, pipes, text)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    text: bool = True,
    check: bool = False,
    input: str | None = None,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, capture_output=True, text=, env=, cwd=, timeout=, check=,
    input=)`, forked when it can be; past `timeout` the program is killed and TimeoutExpired
    raised."""
    environment = dict(os.environ if env is None else env)
    folder = str(cwd if cwd is not None else os.getcwd())
    if not _forkable(argv):
        return subprocess.run(
            list(argv),
            env=environment,
            cwd=folder,
            capture_output=True,
            text=text,
            timeout=timeout,
            check=check,
            input=input,
        )
    done: subprocess.CompletedProcess[Any] = _zygote_for(environment).run(
        list(argv[1:]), environment, folder, timeout, input
    )
    if text:
        done.stdout, done.stderr = _text(done.stdout), _text(done.stderr)
    if check:
        done.check_returncode()
    return done


def _forkable(argv: Sequence[str]) -> bool:
    """`python SCRIPT ...` or `python -c CODE ...` of this interpreter, forks allowed."""
    if FRESH or len(argv) < 2 or argv[0] != sys.executable:
        return False
    return argv[1] == "-c" or not argv[1].startswith("-")


def _stream_ok(value: object) -> bool:
    """None (ours), PIPE, or an open file descriptor."""
    return value is None or value == subprocess.PIPE or (isinstance(value, int) and value >= 0)


_ZYGOTES: dict[tuple[int, tuple[tuple[str, str], ...]], _Zygote] = {}


def _zygote_for(env: Mapping[str, str]) -> _Zygote:
    """This test process's zygote for programs started with `env`'s import-time settings.
    Log levels, visible devices and JAX's platforms are read later (at the first log line or
    device use, in the forked program) and Keras's backend defaults to TensorFlow's: these do
    not need a zygote of their own."""
    later = ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS")
    at_import = {k: v for k, v in env.items() if k.startswith(_AT_IMPORT) and k not in later}
    at_import.setdefault("KERAS_BACKEND", "tensorflow")
    key = (os.getpid(), tuple(sorted({**_read_at_start(env), **at_import}.items())))
    if key not in _ZYGOTES:
        _ZYGOTES[key] = _Zygote(PRELOADED, {**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return _ZYGOTES[key]
