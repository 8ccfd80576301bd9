"""Pick the reader by content, not by extension, and run it on metadata only.

Every content problem (truncated, garbage, a missing shard) is a `CorruptCheckpoint`; whether
that means "broken" or "still being written" is decided by the caller from how recently the file
changed (`core.completion`). `NotReady` is only for what is certainly transient: a writer's
lock, a file that changed or vanished during the read.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from ..core.errors import NotACheckpoint, UnreadableCheckpoint
from ..core.model import CheckpointInfo
from ..fs import beneath, discovery, fsops
from ..fs.fsops import Refused
from . import (
    file_detect,
    folder_readers,
    hdf5,
    keras_v3,
    savedmodel,
    tf_checkpoint,
    window,
)


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
    return file_detect.read_file(path, root)


def _is_real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def outside_references(path: Path) -> list[str]:
    """What the HDF5 file `path` (or a `.keras` archive's weights) refers to outside itself."""
    with os.fdopen(beneath.open_regular(path), "rb") as raw:
        head = raw.read(file_detect.HEAD_BYTES)
        if hdf5.find_superblock(head) is not None:
            with hdf5.open_h5(file_detect.name_of(raw)) as f:
                return hdf5.survey(f)
        if head[:4] in file_detect.ZIP_MAGIC:
            window.check_directory(raw)
            with zipfile.ZipFile(raw) as archive:
                if keras_v3.WEIGHTS_MEMBER not in archive.namelist():
                    return []
                with (
                    window.open_member(archive, raw, keras_v3.WEIGHTS_MEMBER) as member,
                    hdf5.open_h5(member) as f,
                ):
                    return hdf5.survey(f)
    return []


def refuse_outside_references(path: Path) -> None:
    """Raise fsops.Refused if `path` refers to data outside itself: rewriting it (split,
    compress) would copy bytes from outside the root into it, or drop them."""
    outside = outside_references(path)
    if outside:
        shown = "; ".join(outside[:3])
        raise Refused(f"not rewritten: {path} refers to data outside the file ({shown})")
