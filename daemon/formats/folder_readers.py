"""The reader of a folder checkpoint: the `reader` of the format row whose layout claims it.

A reader judges its folder as a whole: every file its layout requires is there and itself
complete, or it raises `CorruptCheckpoint` naming what is missing or broken (the indexer makes
that `incomplete` while the folder may still be written, `corrupt` once it has settled) and
`NotReady` for what is certainly transient. It opens files beneath `root` only (`fs.beneath`),
never follows a symlink, and runs in the reader child (`children.reader_child`) like any file
read. SavedModel folders keep their own path (`formats.savedmodel`: TensorFlow's child).
"""

from __future__ import annotations

from pathlib import Path

from ..core import families
from ..core.errors import NotACheckpoint
from ..core.model import CheckpointInfo
from ..fs import folder_layouts


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """Metadata of the folder checkpoint `folder`, by the reader of the layout that claims it."""
    claimed = folder_layouts.claim_of(folder)
    if claimed is None:
        raise NotACheckpoint(f"{folder.name}: a folder no checkpoint layout claims")
    row = families.row(claimed.family)
    if row is None or row.reader is None:
        raise NotACheckpoint(f"{folder.name}: no reader for {claimed.family} folders")
    info: CheckpointInfo = families.resolve(row.reader)(folder, root)
    return info
