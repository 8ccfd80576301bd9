"""A filesystem whose rename fails, as a real process sees it: `no_rename.c` compiled with gcc
into an LD_PRELOAD library that fails rename(2), renameat(2) and renameat2(2) under a path
prefix with a chosen errno (EXDEV, ENOSYS, ENOTSUP: what object stores' FUSE mounts answer).
Only processes started with `env(...)` (a fresh interpreter: the forked CLI's zygote would not
load it) see it; the test process never does."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("no_rename.c")


def build(folder: Path) -> Path:
    """The library, compiled into `folder` (gcc, a second at most)."""
    library = folder / "libno_rename.so"
    if not library.exists():
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(SOURCE), "-ldl"],
            check=True,
            capture_output=True,
        )
    return library


def env(library: Path, under: Path, code: int = errno.EXDEV) -> dict[str, str]:
    """The environment of a process whose renames under `under` fail with `code`."""
    return {
        "LD_PRELOAD": str(library),
        "CKPT_TEST_NO_RENAME_UNDER": str(under),
        "CKPT_TEST_NO_RENAME_ERRNO": str(code),
    }
