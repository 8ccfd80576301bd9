"""A hook that floods its output costs the daemon nothing (issue 20, item 6).

The real daemon (`ckpt serve`) runs a real hook on a real event (an empty `.h5` dropped into
its root is `corrupt`); the hook writes 1 GiB to stderr and 256 MiB to stdout, then a last line,
and fails. The daemon logs that last line, and its own peak RSS (VmHWM, read from /proc while
it runs) stays far below what it read: it used to keep all of stderr, then 4 kB of it (61 MB
became 3.2 GB).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.daemon import Daemon, service_workspace

MB = 1 << 20
FLOOD = (
    "import sys\n"
    "block = b'x' * (1 << 20)\n"
    "for _ in range(256):\n"
    "    sys.stdout.buffer.write(block)\n"
    "for _ in range(1024):\n"
    "    sys.stderr.buffer.write(block)\n"
    "sys.stderr.buffer.write(b'\\nthe last words\\n')\n"
    "sys.exit(3)\n"
)


def peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(ln for ln in status.splitlines() if ln.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_a_hook_flooding_its_output_leaves_the_daemon_small(tmp_path: Path) -> None:
    hooks = (
        "hooks:\n"
        "  - on: [corrupt]\n"
        f"    command: {json.dumps([sys.executable, '-c', FLOOD])}\n"
        "    timeout: 10m\n"
    )
    ws = service_workspace(tmp_path, hooks)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    before = peak_rss(daemon.proc.pid)
    run = ws.root / "run"
    run.mkdir()
    (run / "empty.h5").write_bytes(b"")
    daemon.wait_for_log("hook_failed", timeout=600)
    after = peak_rss(daemon.proc.pid)
    failed = next(ln for ln in daemon.log.splitlines() if "hook_failed" in ln)
    assert "exited 3: the last words" in failed, failed
    # What it wrote is 1.25 GiB; what the daemon may grow by is a small constant.
    assert after - before < 64 * MB, (before // MB, after // MB)
    assert daemon.stop() == 0, daemon.log
