"""Read the model config a legacy HDF5 file stores, in a child process (libhdf5 is C: a
hostile file may crash it). `ckpt describe` asks it; the parent never opens HDF5 itself.

    python -m ckpt_daemon.children.config_child PATH [ROOT]

Prints one JSON line: {"config": "<model_config as stored>" | null} or {"error": "..."}.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from ..core.errors import CorruptCheckpoint
from . import protocol
from .reader_child import MEMORY_BUDGET_BYTES, limit_memory  # metadata needs a few MB

TIMEOUT_SECONDS = 30.0


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
    reply = protocol.last_reply(done.stdout)
    if reply is None:
        raise CorruptCheckpoint(f"{path}: the config reader died (exit {done.returncode})")
    if "error" in reply:
        raise CorruptCheckpoint(f"{path}: {reply['error']}")
    text = reply.get("config")
    return None if text is None else str(text).encode()


def main(argv: list[str]) -> int:
    return protocol.answer(len(argv) in (1, 2), "config_child PATH [ROOT]", lambda: _config(argv))


def _config(argv: list[str]) -> dict[str, Any]:
    from ..formats.model_config import h5_config  # before the limit: h5py and numpy are big

    limit_memory(MEMORY_BUDGET_BYTES)
    data = h5_config(Path(argv[0]), Path(argv[1]) if len(argv) == 2 else None)
    return {"config": None if data is None else data.decode("utf-8", "replace")}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
