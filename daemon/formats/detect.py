"""Pick the reader by content, not by extension, and run it on metadata only.

Every content problem (truncated, garbage, a missing shard) is a `CorruptCheckpoint`; whether
that means "broken" or "still being written" is decided by the caller from how recently the file
changed (`daemon.completion`). `NotReady` is only for what is certainly transient: a writer's
lock, a file that changed or vanished during the read.
"""

from __future__ import annotations

import errno
import os
import zipfile
from pathlib import Path
from typing import BinaryIO

from daemon.errors import CorruptCheckpoint, NotACheckpoint, UnreadableCheckpoint
from daemon.formats import hdf5, keras_h5, keras_v3, savedmodel, tf_checkpoint
from daemon.model import CheckpointInfo

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_HEAD_BYTES = 65536 + 8


def read_checkpoint(path: Path, family: str = "file") -> CheckpointInfo:
    """Metadata of a checkpoint: a file, a TF checkpoint `prefix`, or a SavedModel folder."""
    if family == "tf-checkpoint":
        return tf_checkpoint.read(path)
    if path.is_dir():
        if savedmodel.is_savedmodel(path):
            return savedmodel.read(path)
        raise NotACheckpoint("a folder without saved_model.pb")
    try:
        with open(path, "rb") as raw:
            return _read_file(path, raw)
    except PermissionError as exc:
        raise UnreadableCheckpoint(f"permission denied: {exc.strerror}") from exc
    except IsADirectoryError as exc:
        raise NotACheckpoint("a folder") from exc
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.ENXIO, errno.ESTALE):
            raise UnreadableCheckpoint(f"I/O error: {exc.strerror}") from exc
        raise


def _read_file(path: Path, raw: BinaryIO) -> CheckpointInfo:
    head = raw.read(_HEAD_BYTES)
    size = os.fstat(raw.fileno()).st_size
    if size == 0:
        raise CorruptCheckpoint("empty file")
    if hdf5.find_superblock(head) is not None:
        problem = hdf5.check_eof(head, size)
        if problem:
            raise CorruptCheckpoint(problem)
        return _read_hdf5(path)
    if head[:4] in ZIP_MAGIC:
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise CorruptCheckpoint(f"zip archive without a central directory: {exc}") from exc
        with archive:
            return keras_v3.read_archive(archive, raw)
    raise CorruptCheckpoint(f"neither an HDF5 file nor a zip archive (starts with {head[:8]!r})")


def _read_hdf5(path: Path) -> CheckpointInfo:
    with hdf5.open_h5(str(path)) as f:
        if keras_h5.is_legacy(f):
            return keras_h5.read(f)
        if keras_v3.is_weights_store(f):
            return keras_v3.read_weights_file(f)
    raise NotACheckpoint("an HDF5 file without Keras model groups")
