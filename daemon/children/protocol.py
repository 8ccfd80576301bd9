"""The protocol the child programs speak with their parent: one line of JSON per request on the
child's stdin, one per reply on its stdout. `read_line` is the parent's half: the next reply line
within a deadline, so a child that hangs or dies cannot stall the daemon.

Its own module because the parent and child halves of `reader_child` live apart (the child side
runs the format readers), and more clients may speak it."""

from __future__ import annotations

import os
import select
import subprocess
import time


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
