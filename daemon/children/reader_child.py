"""Read untrusted checkpoint files in a child process with a time and a memory limit.

libhdf5 is C: a hostile file can crash it (20,000 nested groups: SIGSEGV), make it allocate
without bound, or block. None of that may take the daemon (or a scan) down, so every checkpoint
file is read by a child: `read()` sends it a path and gets the `CheckpointInfo` back as JSON
(never pickle: the child is the side that touched hostile bytes). A child that crashes or
does not answer in time is killed and replaced; the file is recorded `corrupt` with the reason.
Inside `session()` (a scan) or after `keep_session()` (the service's worker) one child serves
every read, so a read costs a round trip, not a Python start.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .. import python_module
from ..core import families
from ..core.errors import (
    CorruptCheckpoint,
    NotACheckpoint,
    NotReady,
    ReadProblem,
    UnfinishedSave,
    UnreadableCheckpoint,
)
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from .protocol import read_line

# The modules outside the package that registered format rows (`core.families.extra_modules`):
# the child imports them, so that it knows their rows too (set by the parent when it starts one).
FAMILY_MODULES = "CKPT_FAMILY_MODULES"
READ_TIMEOUT_SECONDS = 30.0
MEMORY_BUDGET_BYTES = 192 << 20  # address space the child may add to what its imports took
# Made once: a child out of memory answers without building it.
_OUT_OF_MEMORY = f"reading needs more than {MEMORY_BUDGET_BYTES >> 20} MiB of memory: refused"
RESTART_ABOVE_RSS_BYTES = 160 << 20  # a child that grew this big is replaced after the read
_PROBLEMS: dict[str, type[Exception]] = {
    "CorruptCheckpoint": CorruptCheckpoint,
    "UnreadableCheckpoint": UnreadableCheckpoint,
    "NotReady": NotReady,
    "UnfinishedSave": UnfinishedSave,
    "NotACheckpoint": NotACheckpoint,
    "FileNotFoundError": FileNotFoundError,
}


def read(
    path: Path, root: Path | None = None, timeout: float = READ_TIMEOUT_SECONDS
) -> CheckpointInfo:
    """`detect.read_checkpoint(path, root=root)`, done by a child process.

    Raises what the reader raises (ReadProblem subclasses, FileNotFoundError), and
    CorruptCheckpoint when the child crashed or timed out on this file.
    """
    active = _Child.current
    if active is not None:
        return active.read(path, root, timeout)
    one_shot = _Child()
    try:
        return one_shot.read(path, root, timeout)
    finally:
        one_shot.close()


@contextmanager
def session() -> Iterator[None]:
    """Reads inside share one child, started at the first read and stopped at the end."""
    if _Child.current is not None:
        yield
        return
    _Child.current = _Child()
    try:
        yield
    finally:
        current, _Child.current = _Child.current, None
        current.close()


def keep_session() -> None:
    """A child that outlives scans (the service's worker), started now so that the first file
    after a quiet spell does not wait for its start: stopped by `end_idle`."""
    if _Child.current is None:
        _Child.current = _Child()
        with suppress(OSError):  # the first read says why
            _Child.current.start()


def end_idle(max_idle_seconds: float) -> None:
    current = _Child.current
    if current is not None and time.monotonic() - current.last_used >= max_idle_seconds:
        _Child.current = None
        current.close()


class _Child:
    current: _Child | None = None

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self.last_used = time.monotonic()
        self._modules = ""  # the FAMILY_MODULES it was started with

    def read(self, path: Path, root: Path | None, timeout: float) -> CheckpointInfo:
        path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root)) if root else None
        request = {
            "path": os.fsencode(path).hex(),
            "root": os.fsencode(root).hex() if root else None,
        }
        with self._lock:
            self.last_used = time.monotonic()
            try:
                proc = self._running()
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
                line, self._buffer = read_line(proc, self._buffer, time.monotonic() + timeout)
            except TimeoutError:
                self.close(kill=True)
                raise CorruptCheckpoint(f"read timed out after {timeout:g} s") from None
            except OSError as exc:  # could not start, or the pipe broke: the child died
                line = None
                if self.proc is None:
                    raise NotReady(f"reader process could not start: {exc}") from None
            if line is None:
                raise CorruptCheckpoint(self._death()) from None
            self._recycle_if_big()
        return _answer(json.loads(line))

    def start(self) -> None:
        with self._lock:
            self._running()

    def _running(self) -> subprocess.Popen[bytes]:
        modules = ",".join(families.extra_modules())
        if self.proc is not None and modules != self._modules:
            self.close()  # a format row registered since it started: one that knows it
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
            env[FAMILY_MODULES] = self._modules = modules
            self._buffer = b""
            self.proc = subprocess.Popen(
                python_module("children.reader_child"),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
            )
        return self.proc

    def _death(self) -> str:
        proc, code = self.proc, None
        if proc is not None:
            with suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=10)
        self.close(kill=True)
        if code is not None and code < 0:
            try:
                return f"reader crashed ({signal.Signals(-code).name})"
            except ValueError:
                return f"reader crashed (signal {-code})"
        return f"reader exited ({code})"

    def _recycle_if_big(self) -> None:
        """glibc rarely gives memory back: a child that read something big starts afresh."""
        if self.proc is None:
            return
        try:
            with open(f"/proc/{self.proc.pid}/statm") as statm:
                rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return
        if rss > RESTART_ABOVE_RSS_BYTES:
            self.close()

    def close(self, *, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        if proc.stdin:
            with suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _answer(reply: dict[str, Any]) -> CheckpointInfo:
    if "info" in reply:
        return info_from_json(reply["info"])
    problem = _PROBLEMS.get(str(reply.get("problem")), CorruptCheckpoint)
    raise problem(str(reply.get("reason") or "unknown problem"))


def info_from_json(data: dict[str, Any]) -> CheckpointInfo:
    layers = tuple(
        Layer(
            layer["name"],
            layer["class_name"],
            layer["n_params"],
            tuple(WeightInfo(w["name"], tuple(w["shape"]), w["dtype"]) for w in layer["weights"]),
        )
        for layer in data["layers"]
    )
    optimizer = OptimizerInfo(**data["optimizer"]) if data["optimizer"] else None
    return CheckpointInfo(
        **{
            **data,
            "format": Format(data["format"]),
            "kind": Kind(data["kind"]),
            "layers": layers,
            "optimizer": optimizer,
            "signatures": tuple(data["signatures"]),
            "notes": tuple(data["notes"]),
        }
    )


# ---- the child side ----


def _serve() -> None:
    """Answer one JSON line per request line on stdin until it closes."""
    # C libraries may print to fd 1: keep the protocol on a private copy of it.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _die_with_parent()
    from ..formats import detect  # imported before the limit: h5py and numpy are big

    for name in filter(None, os.environ.get(FAMILY_MODULES, "").split(",")):
        importlib.import_module(name)  # a format outside the package registers its row

    limit_memory(MEMORY_BUDGET_BYTES)
    for line in sys.stdin:
        request = json.loads(line)
        path = Path(os.fsdecode(bytes.fromhex(request["path"])))
        root = Path(os.fsdecode(bytes.fromhex(request["root"]))) if request["root"] else None
        try:
            reply: dict[str, Any] = {
                "info": dataclasses.asdict(detect.read_checkpoint(path, root=root))
            }
        except MemoryError:
            reply = {"problem": "CorruptCheckpoint", "reason": _OUT_OF_MEMORY}
        except (ReadProblem, FileNotFoundError) as exc:
            reply = {"problem": type(exc).__name__, "reason": _first_line(exc)}
        except Exception as exc:  # a hostile file: say what broke, serve the next one
            reason = f"unexpected {type(exc).__name__} while reading: {_first_line(exc)}"
            reply = {"problem": "CorruptCheckpoint", "reason": reason}
        out.write(json.dumps(reply) + "\n")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def limit_memory(budget: int) -> None:
    """No core dump, and at most `budget` bytes of address space more than the imports took."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with open("/proc/self/statm") as statm:
        limit = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _die_with_parent() -> None:
    """A child stuck in a read must not outlive a killed daemon."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _serve()
