"""The protocol the child programs speak with their parent: lines of JSON on stdout. The reader
child answers one line per request line on its stdin (`read_line` is the parent's half: the next
reply line within a deadline, so a child that hangs or dies cannot stall the daemon); a one-shot
child (a load probe, the config reader) answers its arguments with one line and exit 0, or its
usage and exit 2 (`answer`; `last_reply` is the parent's half).

Its own module because the parent and child halves live apart (a child's side runs the format
readers or a model's library), and every child speaks it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def read_line(
    proc: subprocess.Popen[bytes], buffer: bytes, deadline: float
) -> tuple[str | None, bytes]:
    """The next line a child writes (None if it died first), and what it wrote after it.
    Raises TimeoutError at `deadline` (monotonic)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None, buffer
            buffer += chunk
    line, _, rest = buffer.partition(b"\n")
    return line.decode("utf-8", "replace"), rest


def last_reply(stdout: str | bytes) -> dict[str, Any] | None:
    """The parent's side of a one-shot child: the last line it printed (a C library may print
    before it), as JSON; None when it printed none."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return None


def answer(ok: bool, usage: str, work: Callable[[], dict[str, Any]]) -> int:
    """The child's side: `work()`'s answer printed as one JSON line, or {"error": ...} when it
    raised (exit 0); its `usage` when the arguments are not `ok` (exit 2)."""
    if not ok:
        print(f"usage: python -m ckpt_daemon.children.{usage}", file=sys.stderr)
        return 2
    try:
        result = work()
    except Exception as exc:  # a hostile file, a library that fails: the report says why
        text = str(exc).strip().splitlines()
        result = {"error": f"{type(exc).__name__}: {text[0] if text else ''}"}
    print(json.dumps(result))
    return 0
