"""The model config a Keras file stores, as stored: `config.json` of a `.keras` archive, the
`model_config` root attribute of a legacy `.h5`. Metadata only, bounded; opened beneath its
root without following symlinks (`fs.beneath`). The HDF5 half touches libhdf5: callers outside
a child process use `children.config_child` for it."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ..core.errors import CorruptCheckpoint
from ..fs import beneath
from . import hdf5
from .file_detect import ZIP_MAGIC
from .keras_v3 import CONFIG_MEMBER, MAX_JSON_BYTES
from .window import read_member


def is_archive(path: Path, root: Path | None = None) -> bool:
    with os.fdopen(beneath.open_regular(path, root), "rb") as raw:
        return raw.read(4) in ZIP_MAGIC


def archive_config(path: Path, root: Path | None = None) -> bytes:
    """`config.json` of a `.keras` archive, byte for byte (zipfile and json: no C reader)."""
    with os.fdopen(beneath.open_regular(path, root), "rb") as raw:
        try:
            with zipfile.ZipFile(raw) as archive:
                return read_member(archive, CONFIG_MEMBER, MAX_JSON_BYTES)
        except (
            KeyError,
            zipfile.BadZipFile,
            EOFError,
            UnicodeDecodeError,
            NotImplementedError,
        ) as exc:
            raise CorruptCheckpoint(f"{path}: no readable {CONFIG_MEMBER}: {exc}") from exc


def h5_config(path: Path, root: Path | None = None) -> bytes | None:
    """The `model_config` root attribute of a legacy HDF5 full model, as stored (None: a
    weights-only file). libhdf5: run this in a child process."""
    with os.fdopen(beneath.open_regular(path, root), "rb") as raw, hdf5.open_h5(raw) as f:
        text = hdf5.attr_text(f, "model_config")
    if text is not None and len(text) > MAX_JSON_BYTES:
        raise CorruptCheckpoint(f"{path}: model_config beyond {MAX_JSON_BYTES >> 20} MiB")
    return None if text is None else text.encode()
