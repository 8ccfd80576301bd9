"""Read the model config a legacy HDF5 file stores, in a child process (libhdf5 is C: a
hostile file may crash it). `ckpt describe` asks it; the parent never opens HDF5 itself.

    python -m ckpt_daemon.children.config_child PATH [ROOT]

Prints one JSON line: {"config": "<model_config as stored>" | null} or {"error": "..."}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .. import python_module
from ..core.errors import CorruptCheckpoint

TIMEOUT_SECONDS = 30.0
MEMORY_BUDGET_BYTES = 192 << 20  # as the reader child: metadata needs a few MB


def stored_config(path: Path, root: Path | None = None) -> bytes | None:
    """The parent's side: `formats.model_config.h5_config(path, root)`, done by a child."""
    cmd = [*python_module("children.config_child"), os.fsdecode(path)]
    if root is not None:
        cmd.append(os.fsdecode(root))
    try:
        done = subprocess.run(
            cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as exc:
        raise CorruptCheckpoint(f"{path}: reading its model config took over 30 s") from exc
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    try:
        reply = json.loads(lines[-1])
    except (IndexError, ValueError) as exc:
        raise CorruptCheckpoint(f"{path}: the config reader died (exit {done.returncode})") from exc
    if "error" in reply:
        raise CorruptCheckpoint(f"{path}: {reply['error']}")
    text = reply.get("config")
    return None if text is None else str(text).encode()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m ckpt_daemon.children.config_child PATH [ROOT]", file=sys.stderr)
        return 2
    import resource

    from ..formats.model_config import h5_config  # before the limit: h5py and numpy are big

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    limit = pages * os.sysconf("SC_PAGE_SIZE") + MEMORY_BUDGET_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        data = h5_config(Path(argv[0]), Path(argv[1]) if len(argv) == 2 else None)
        reply = {"config": None if data is None else data.decode("utf-8", "replace")}
    except Exception as exc:  # a hostile file: say what broke
        text = str(exc).strip().splitlines()
        reply = {"error": f"{type(exc).__name__}: {text[0] if text else ''}"}
    print(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
