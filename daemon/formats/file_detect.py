"""Read one checkpoint file by its content, not its extension: HDF5 (Keras), a zip (Keras 3,
torch.save), a legacy torch pickle stream, safetensors. Metadata only, opened beneath its root
without following symlinks.

`formats.detect` dispatches files here and folders to their layouts; a folder's readers
(`formats.hf_weights`) read each of its files here too, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import zipfile
from pathlib import Path
from typing import BinaryIO

from ..core import families
from ..core.errors import CorruptCheckpoint, NotACheckpoint, UnreadableCheckpoint
from ..core.model import CheckpointInfo
from ..fs import beneath
from ..fs.fsops import Refused
from . import hdf5, keras_h5, keras_v3, safetensors_file, torch_zip, window

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
HEAD_BYTES = 65536 + 8
# Suffixes many tools use for files that are no checkpoint (a `.bin` of anything): their
# unknown content is "not a checkpoint" (skipped, with the reason), never "corrupt".
FOREIGN_SUFFIXES = (".bin",)


def read_file(path: Path, root: Path | None = None) -> CheckpointInfo:
    """Metadata of the checkpoint file `path`, opened beneath `root` (if given), a regular
    file only."""
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
        return _read_file(raw, path.name.lower(), path.suffix.lower() in FOREIGN_SUFFIXES)


def _read_file(raw: BinaryIO, name: str = "", foreign: bool = False) -> CheckpointInfo:
    head = raw.read(HEAD_BYTES)
    size = os.fstat(raw.fileno()).st_size
    if size == 0:
        raise CorruptCheckpoint("empty file")
    # Each format row's file reader in turn (`core.families`), by content: the first whose
    # bytes these are reads them (several rows share one: a zip is Keras's or torch's). The
    # rows that name the file's suffix go first: a format's magic may look like another's.
    files = [r for r in families.rows() if r.reader is not None and not r.folder]
    named = [r for r in files if name.endswith(r.suffixes)] if name else []
    for reader in dict.fromkeys(r.reader for r in (*named, *files)):
        info: CheckpointInfo | None = families.resolve(reader)(raw, head, size)
        if info is not None:
            return info
    problem = (
        "neither an HDF5 file nor a zip archive, nor a torch or safetensors file "
        f"(starts with {head[:8]!r})"
    )
    raise NotACheckpoint(problem) if foreign else CorruptCheckpoint(problem)


def read_hdf5(raw: BinaryIO, head: bytes, size: int) -> CheckpointInfo | None:
    """A Keras HDF5 file (`formats.keras_h5`, the weights store of `formats.keras_v3`)."""
    if hdf5.find_superblock(head) is None:
        return None
    problem = hdf5.check_eof(head, size)
    if problem:
        raise CorruptCheckpoint(problem)
    with hdf5.open_h5(name_of(raw)) as f:
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


def read_zip(raw: BinaryIO, head: bytes, _size: int) -> CheckpointInfo | None:
    """A zip archive: a torch.save zip (Lightning's too) or a Keras `.keras`."""
    if head[:4] not in ZIP_MAGIC:
        return None
    window.check_directory(raw)
    try:
        archive = zipfile.ZipFile(raw)
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpoint(f"zip archive without a central directory: {exc}") from exc
    # ValueError: a member name flagged UTF-8 that is not, an offset past 2**63;
    # NotImplementedError: "zip file version 9.6" (found by fuzzing)
    except (ValueError, NotImplementedError) as exc:
        raise CorruptCheckpoint(f"zip archive zipfile cannot read: {exc}") from exc
    with archive:
        if torch_zip.is_torch_zip(archive):
            return torch_zip.read_zip(archive, raw)
        return keras_v3.read_archive(archive, raw)


def read_torch_legacy(raw: BinaryIO, head: bytes, _size: int) -> CheckpointInfo | None:
    return torch_zip.read_legacy(raw) if torch_zip.is_legacy(head) else None


def read_safetensors(raw: BinaryIO, head: bytes, size: int) -> CheckpointInfo | None:
    return safetensors_file.read(raw) if safetensors_file.looks_like(head, size) else None


def name_of(raw: BinaryIO) -> str | BinaryIO:
    """A name under which libhdf5 opens the very file we opened (not whatever the path names
    now): its /proc descriptor link; the file object itself where there is no /proc."""
    proc = f"/proc/self/fd/{raw.fileno()}"
    return proc if os.path.exists(proc) else raw
