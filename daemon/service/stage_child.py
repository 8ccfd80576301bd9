"""One attempt of a pipeline stage, as a child process: its argv (the user's command or our
own `ckpt` for a built-in stage), the daemon's environment plus `CKPT_*`, the checkpoint's JSON
document on stdin, its own process group (killed whole at the stage's time limit), dying with
the daemon (PR_SET_PDEATHSIG: a SIGKILLed daemon leaves no orphan that could run beside the
job's next holder), its output read as it comes and only the tail kept (a flood costs no
memory), and the job's lease renewed while it runs (lost: the child is killed, nothing kept)."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

from .. import python_module
from ..catalog.audit import actor
from ..core.model import Checkpoint
from ..core.pipeline import Stage, argv_for, environment
from ..core.views import checkpoint_json
from ..settings.config import Config
from ..usecases.pipeline import Attempt

TAIL_BYTES = 16_384  # of stdout and of the interleaved output, each
STOP_GRACE_SECONDS = 5.0


def ckpt_command(config: Config) -> list[str]:
    """Our own `ckpt`, on this config and catalog, for the built-in stages."""
    own = [] if config.source.startswith("<") else ["--config", config.source]
    return [*python_module(""), *own, "--db", config.database]


def run_attempt(
    config: Config,
    stage: Stage,
    checkpoint: Checkpoint,
    *,
    still_ours: Callable[[], bool],
    stopping: threading.Event,
    renew_every: float,
) -> Attempt:
    """Run the stage's child once for `checkpoint`; `still_ours()` renews the job's lease and
    says whether the job is still this process's."""
    artifact = ""
    if stage.wants_artifact():
        made = _artifact(config, checkpoint, stopping)
        if isinstance(made, Attempt):
            return made
        artifact = made
    argv = argv_for(stage, checkpoint, ckpt_command(config), artifact)
    env = {
        **os.environ,
        **environment(stage, checkpoint),
        "CKPT_ARTIFACT": artifact,
        "CKPT_ACTOR": f"daemon:{actor()}",
    }
    document = json.dumps(checkpoint_json(checkpoint)).encode()
    return _run(argv, env, document, stage.timeout_seconds, still_ours, stopping, renew_every)


def _artifact(config: Config, checkpoint: Checkpoint, stopping: threading.Event) -> str | Attempt:
    """The checkpoint's inference artifact, made first (`ckpt split --json`): its path."""
    argv = [*ckpt_command(config), "split", str(checkpoint.id), "--json"]
    done = _run(argv, dict(os.environ), b"", 3600.0, lambda: True, stopping, 30.0)
    if done.exit_code != 0:
        return Attempt(
            None, "", done.output_tail, error=f"its artifact: {done.error or 'ckpt split failed'}"
        )
    try:
        path = json.loads(done.stdout_tail)["artifact"]
    except (ValueError, KeyError, TypeError):
        return Attempt(
            None, "", done.output_tail, error="its artifact: no path in ckpt split's answer"
        )
    return str(path)


def _run(
    argv: list[str],
    env: dict[str, str],
    stdin: bytes,
    timeout: float,
    still_ours: Callable[[], bool],
    stopping: threading.Event,
    renew_every: float,
) -> Attempt:
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own group: killed whole
            preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        return Attempt(None, "", "", error=f"cannot start {argv[0]!r}: {exc.strerror or exc}")
    stdout_tail: collections.deque[bytes] = collections.deque()
    output_tail: collections.deque[bytes] = collections.deque()
    lock = threading.Lock()
    readers = [
        threading.Thread(target=_drain, args=(child.stdout, [stdout_tail, output_tail], lock)),
        threading.Thread(target=_drain, args=(child.stderr, [output_tail], lock)),
    ]
    for reader in readers:
        reader.start()
    _feed(child, stdin)
    error = _wait(child, timeout, still_ours, stopping, renew_every)
    for reader in readers:
        reader.join()
    return Attempt(
        None if error else child.returncode,
        b"".join(stdout_tail).decode(errors="replace"),
        b"".join(output_tail).decode(errors="replace"),
        error=error,
    )


def _wait(
    child: subprocess.Popen[bytes],
    timeout: float,
    still_ours: Callable[[], bool],
    stopping: threading.Event,
    renew_every: float,
) -> str | None:
    deadline = time.monotonic() + timeout
    next_renewal = time.monotonic() + renew_every
    while True:
        try:
            child.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now > deadline:
            _kill(child)
            return f"timed out after {timeout:g} s"
        if stopping.is_set():
            _kill(child)
            return "the service stopped"
        if now >= next_renewal:
            next_renewal = now + renew_every
            if not still_ours():
                _kill(child)
                return "the job is no longer ours (its lease expired)"


def _kill(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    except ProcessLookupError:
        child.wait()


def _feed(child: subprocess.Popen[bytes], data: bytes) -> None:
    stdin = child.stdin
    assert stdin is not None
    try:
        stdin.write(data)
    except (BrokenPipeError, OSError):
        pass  # a child that does not read its stdin
    finally:
        with contextlib.suppress(OSError):
            stdin.close()


def _drain(
    stream: IO[bytes] | None, tails: list[collections.deque[bytes]], lock: threading.Lock
) -> None:
    """Read a pipe to its end, keeping only the last TAIL_BYTES in each of `tails`."""
    assert stream is not None
    with stream:
        for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
            with lock:
                for tail in tails:
                    tail.append(chunk)
                    _trim(tail)


def _trim(tail: collections.deque[bytes]) -> None:
    size = sum(len(c) for c in tail)
    while size > TAIL_BYTES and len(tail) > 1:
        size -= len(tail.popleft())
    if size > TAIL_BYTES:
        tail[0] = tail[0][-TAIL_BYTES:]


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
