"""ckpt-daemon: watches training folders, indexes checkpoints, manages them.

Installed as `ckpt_daemon` (the repository folder is `daemon/`; `daemon` is python-daemon's
import name). Layers, one folder each: see docs/architecture.md."""

from __future__ import annotations

import sys

PACKAGE = __name__  # the installed import name, whatever the folder is called


def python_module(module: str) -> list[str]:
    """The command that runs one of our modules (`"children.reader_child"`; `""` for the CLI) as
    `python -m` with this interpreter: works from any cwd once the package is installed.

    `-P`: the cwd is not put first on `sys.path` (as `-m` otherwise does), so a `numpy.py` or
    `keras_hub.py` dropped into the folder the command runs from is never imported by a child
    (a checkpoint's config may name a module to import)."""
    return [sys.executable, "-P", "-m", f"{PACKAGE}.{module}" if module else PACKAGE]
