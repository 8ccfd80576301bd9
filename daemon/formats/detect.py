"""Pick the reader by content, not by extension, and run it on metadata only.

Every content problem (truncated, garbage, a missing shard) is a `CorruptCheckpoint`; whether
that means "broken" or "still being written" is decided by the caller from how recently the file
changed (`core.completion`). `NotReady` is only for what is certainly transient: a writer's
lock, a file that changed or vanished during the read.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

from ..core.errors import CorruptCheckpoint, NotACheckpoint, UnreadableCheckpoint
from ..core.model import CheckpointInfo
from ..fs import beneath, discovery, fsops
from ..fs.fsops import Refused
from . import (
    folder_readers,
    hdf5,
    keras_h5,
    keras_v3,
    safetensors_file,
    savedmodel,
    tf_checkpoint,
    torch_zip,
    window,
)

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_HEAD_BYTES = 65536 + 8
# Suffixes many tools use for files that are no checkpoint (a `.bin` of anything): their
# unknown content is "not a checkpoint" (skipped, with the reason), never "corrupt".
_FOREIGN_SUFFIXES = (".bin",)


def read_checkpoint(
    path: Path, family: str = discovery.FILE, root: Path | None = None
) -> CheckpointInfo:
    """Metadata of a checkpoint: a file, a TF checkpoint `prefix`, or a SavedModel folder.

    A file is opened beneath `root` without following symlinks, and only if it is a regular
    file (`fs.beneath`); HDF5 links and storage that point outside it are never resolved.
    """
    if family == discovery.TF_CHECKPOINT:
        return tf_checkpoint.read(path)
    if family == discovery.SAVED_MODEL or (root is None and savedmodel.is_savedmodel(path)):
        if savedmodel.is_savedmodel(path):
            return savedmodel.read(path)
        raise NotACheckpoint("a folder without saved_model.pb")
    if _is_real_folder(path):  # a folder checkpoint (fs.folder_layouts), judged as a whole
        try:
            if root is not None:
                fsops.relative_parts(root, path)  # its files are opened beneath the root
            return folder_readers.read(path, root)
        except Refused as exc:
            raise UnreadableCheckpoint(str(exc)) from exc
    try:
        fd = beneath.open_regular(path, root)
    except beneath.NotARegularFile as exc:
        raise NotACheckpoint(str(exc)) from exc
    except Refused as exc:
        raise UnreadableCheckpoint(str(exc)) from exc
    except PermissionError as exc:
        raise UnreadableCheckpoint(f"permission denied: {exc.strerror}") from exc
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.ENXIO, errno.ESTALE):
            raise UnreadableCheckpoint(f"I/O error: {exc.strerror}") from exc
        raise
    with os.fdopen(fd, "rb") as raw:
        return _read_file(raw, path.suffix.lower() in _FOREIGN_SUFFIXES)


def _is_real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def outside_references(path: Path) -> list[str]:
    """What the HDF5 file `path` (or a `.keras` archive's weights) refers to outside itself."""
    with os.fdopen(beneath.open_regular(path), "rb") as raw:
        head = raw.read(_HEAD_BYTES)
        if hdf5.find_superblock(head) is not None:
            with hdf5.open_h5(_name_of(raw)) as f:
                return hdf5.outside_references(f)
        if head[:4] in ZIP_MAGIC:
            window.check_directory(raw)
            with zipfile.ZipFile(raw) as archive:
                if keras_v3.WEIGHTS_MEMBER not in archive.namelist():
                    return []
                with (
                    window.open_member(archive, raw, keras_v3.WEIGHTS_MEMBER) as member,
                    hdf5.open_h5(member) as f,
                ):
                    return hdf5.outside_references(f)
    return []


def refuse_outside_references(path: Path) -> None:
    """Raise fsops.Refused if `path` refers to data outside itself: rewriting it (split,
    compress) would copy bytes from outside the root into it, or drop them."""
    outside = outside_references(path)
    if outside:
        shown = "; ".join(outside[:3])
        raise Refused(f"not rewritten: {path} refers to data outside the file ({shown})")


def _read_file(raw: BinaryIO, foreign: bool = False) -> CheckpointInfo:
    head = raw.read(_HEAD_BYTES)
    size = os.fstat(raw.fileno()).st_size
    if size == 0:
        raise CorruptCheckpoint("empty file")
    if hdf5.find_superblock(head) is not None:
        problem = hdf5.check_eof(head, size)
        if problem:
            raise CorruptCheckpoint(problem)
        return _read_hdf5(raw)
    if head[:4] in ZIP_MAGIC:
        window.check_directory(raw)
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise CorruptCheckpoint(f"zip archive without a central directory: {exc}") from exc
        with archive:
            if torch_zip.is_torch_zip(archive):
                return torch_zip.read_zip(archive, raw)
            return keras_v3.read_archive(archive, raw)
    if torch_zip.is_legacy(head):
        return torch_zip.read_legacy(raw)
    if safetensors_file.looks_like(head, size):
        return safetensors_file.read(raw)
    problem = (
        "neither an HDF5 file nor a zip archive, nor a torch or safetensors file "
        f"(starts with {head[:8]!r})"
    )
    raise NotACheckpoint(problem) if foreign else CorruptCheckpoint(problem)


def _read_hdf5(raw: BinaryIO) -> CheckpointInfo:
    with hdf5.open_h5(_name_of(raw)) as f:
        outside = hdf5.survey(f)
        if keras_h5.is_legacy(f):
            info = keras_h5.read(f)
        elif keras_v3.is_weights_store(f):
            info = keras_v3.read_weights_file(f)
        else:
            raise NotACheckpoint("an HDF5 file without Keras model groups")
    if outside:
        info = dataclasses.replace(info, notes=(*info.notes, hdf5.outside_note(outside)))
    return info


def _name_of(raw: BinaryIO) -> str | BinaryIO:
    """A name under which libhdf5 opens the very file we opened (not whatever the path names
    now): its /proc descriptor link; the file object itself where there is no /proc."""
    proc = f"/proc/self/fd/{raw.fileno()}"
    return proc if os.path.exists(proc) else raw
