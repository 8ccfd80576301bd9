"""The reader of each folder layout (`fs.folder_layouts`): family -> read(folder, root).

A reader judges its folder as a whole: every file its layout requires is there and itself
complete, or it raises `CorruptCheckpoint` naming what is missing or broken (the indexer makes
that `incomplete` while the folder may still be written, `corrupt` once it has settled) and
`NotReady` for what is certainly transient. It opens files beneath `root` only (`fs.beneath`),
never follows a symlink, and runs in the reader child (`children.reader_child`) like any file
read. SavedModel folders keep their own path (`formats.savedmodel`: TensorFlow's child).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..core.errors import NotACheckpoint
from ..core.model import CheckpointInfo, Format
from ..fs import folder_layouts
from . import folder_saves, hf_folder, megatron, rank_files

Reader = Callable[[Path, Path | None], CheckpointInfo]

READERS: dict[str, Reader] = {
    Format.HF_FOLDER.value: hf_folder.read,
    Format.ORBAX.value: folder_saves.read,
    Format.TORCH_DCP.value: folder_saves.read,
    Format.TORCH_RANKS.value: rank_files.read,  # issue 44's stacks (fs.sharded_names)
    Format.MEGATRON_DIST.value: megatron.read_dist,
    Format.MEGATRON_LEGACY.value: megatron.read_legacy,
}


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """Metadata of the folder checkpoint `folder`, by the reader of the layout that claims it."""
    claimed = folder_layouts.claim_of(folder)
    if claimed is None:
        raise NotACheckpoint(f"{folder.name}: a folder no checkpoint layout claims")
    reader = READERS.get(claimed.family)
    if reader is None:
        raise NotACheckpoint(f"{folder.name}: no reader for {claimed.family} folders")
    return reader(folder, root)
