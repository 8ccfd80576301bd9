"""A folder checkpoint's files, as the catalog recorded them, and what moves when it moves.

A folder that is the whole checkpoint moves as one unit (one rename into the trash and back:
the folder keeps its own mtime, which a Trainer's rotation reads); a folder that also holds
other checkpoints' folders (a Trainer `output_dir`) moves only its recorded files. Before any
act, its files are compared with those recorded (names, summed size, newest mtime, hash).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..fs import folder_layouts, fsops


def member_files(folder: Path, files: list[str]) -> list[Path]:
    """The recorded files of `folder` (recorded relative to its parent), in recorded order."""
    return [folder.parent / name for name in files]


def to_move(folder: Path, files: list[str]) -> list[Path]:
    """What trash and restore rename: the folder itself, or only its files."""
    nested = any(len(Path(name).parts) > 2 for name in files)
    try:
        with os.scandir(folder) as entries:  # `any` stops early: the descriptor closed now
            has_subfolders = any(e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        has_subfolders = False  # gone: the recheck says so
    return [folder] if nested or not has_subfolders else member_files(folder, files)


def check_unchanged_names(folder: Path, files: list[str], moved: list[Path]) -> None:
    """Refuse when files came or went in a folder moved whole (new bytes nobody indexed)."""
    if moved != [folder]:
        return
    now = sorted(str(p.relative_to(folder.parent)) for p in folder_layouts.tree_files(folder))
    if now != sorted(files):
        added = sorted(set(now) - set(files))
        gone = sorted(set(files) - set(now))
        what = f"{len(added)} file(s) added" if added else f"{len(gone)} file(s) gone"
        raise fsops.Refused(
            f"{folder} changed since it was indexed ({what}): skipped; the next scan re-indexes it"
        )
