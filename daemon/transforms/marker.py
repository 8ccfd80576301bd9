"""The mark inside every file split writes: ours from the moment it exists, whatever its name.

An HDF5 artifact carries a root attribute `ckpt_daemon_artifact`, a `.keras` one its zip
comment, a `.safetensors` one an entry of its header's `__metadata__` (strings only, as the
format demands), a Hugging Face inference folder a file `FOLDER_FILE` inside it (its other files
are byte copies of the checkpoint's); all hold JSON `{"kind", "parent", "parent_hash"}`. Keras
ignores the first two (an unknown root attribute, a zip comment), safetensors loaders the third,
`from_pretrained` the fourth (a file it never opens). Scans skip
marked files (never a checkpoint of the run), so an artifact interrupted between its rename
and its catalog row, copied, or renamed into a run never becomes the run's "newest".
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import h5py

from ..core.errors import CorruptCheckpoint
from ..formats import hdf5, safetensors_file
from ..formats.file_detect import ZIP_MAGIC

ATTRIBUTE = "ckpt_daemon_artifact"
FOLDER_FILE = ".ckpt-artifact.json"  # inside an artifact folder (transforms.hf_split)
_MAX_FOLDER_MARK = 1 << 16
_HEAD = 65536 + 8  # where an HDF5 superblock may start (user block up to 64 KiB)


def encode(kind: str, parent: Path, parent_hash: str | None) -> str:
    return json.dumps({"kind": kind, "parent": str(parent), "parent_hash": parent_hash})


def zip_comment(marker: str) -> bytes:
    return json.dumps({ATTRIBUTE: json.loads(marker)}).encode()


def folder_file(marker: str) -> bytes:
    """The content of an artifact folder's `FOLDER_FILE`."""
    return (json.dumps({ATTRIBUTE: json.loads(marker)}, indent=1) + "\n").encode()


def read(path: Path) -> dict[str, Any] | None:
    """The marker of `path` (a file, or a folder holding `FOLDER_FILE`), or None (not ours,
    or not readable: the reader then decides)."""
    try:
        # Never through a symlink, never a FIFO or device: a regular file or nothing.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return _folder_mark(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        with os.fdopen(fd, "rb") as raw:
            head = raw.read(_HEAD)
            if head[:4] in ZIP_MAGIC:
                with zipfile.ZipFile(raw) as archive:
                    found = json.loads(archive.comment or b"{}").get(ATTRIBUTE)
            elif hdf5.find_superblock(head) is not None:
                with h5py.File(raw, "r", locking=False) as f:
                    value = f.attrs.get(ATTRIBUTE)
                found = json.loads(value) if isinstance(value, str | bytes) else None
            elif safetensors_file.looks_like(head, os.fstat(raw.fileno()).st_size):
                value = (safetensors_file.header_metadata(raw) or {}).get(ATTRIBUTE)
                found = json.loads(value) if isinstance(value, str) else None
            else:
                return None
    except (OSError, ValueError, zipfile.BadZipFile, AttributeError, CorruptCheckpoint):
        return None
    return found if isinstance(found, dict) and "parent" in found else None


def _folder_mark(dir_fd: int) -> dict[str, Any] | None:
    """The mark in a folder's `FOLDER_FILE` (closes `dir_fd`): a small regular file, read
    without following a link."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(FOLDER_FILE, flags, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            found = json.loads(f.read(_MAX_FOLDER_MARK + 1)[:_MAX_FOLDER_MARK]).get(ATTRIBUTE)
        except (ValueError, AttributeError, RecursionError):
            return None
    return found if isinstance(found, dict) and "parent" in found else None
