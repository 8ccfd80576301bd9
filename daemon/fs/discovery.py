"""Find checkpoint candidates under a root, and stat them. Reads folders, never file contents.

Symlinks are never followed (a link may point outside the root, or loop), temp files of
writers and of our own are skipped, and a SavedModel folder is one checkpoint, not a tree.
"""

from __future__ import annotations

import os
import re
import stat as stat_module
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from ..core import families
from ..core.housekeeping import BACKUP_STATE, backup_state_names
from ..core.model import FileStat, Format
from ..core.versions import VERSIONS_DIR
from . import folder_layouts
from .temp_names import TEMP_PREFIX

SAVED_MODEL_MARKERS = ("saved_model.pb", "saved_model.pbtxt")
# Folders that belong to us or to tools, never to a run.
_SKIPPED_DIRS = {".ckpt", ".ckpt-trash", VERSIONS_DIR, ".git", "__pycache__", ".ipynb_checkpoints"}
# Writers' temporary names: TF's `ckpt-1_temp/` folders and
# `*.tempstate<n>` files, `checkpoint.tmp<hex>`, Keras's `tmpXXXX/model.weights.h5` extractions.
_TEMP_NAME = re.compile(rf"(\.tempstate\d*$|\.tmp[0-9a-f]*$|^{re.escape(TEMP_PREFIX)})")
_TEMP_DIR = re.compile(r"(_temp$|^tmp[\w-]{6,}$)")
_DATA_SHARD = re.compile(r"^(?P<prefix>.+)\.data-(?P<index>\d{5})-of-(?P<count>\d{5})$")


# What a candidate is made of: one file (any Keras format), or the two multi-file formats.
FILE, TF_CHECKPOINT, SAVED_MODEL = "file", Format.TF_CHECKPOINT.value, Format.SAVED_MODEL.value


def is_skipped_dir(name: str) -> bool:
    """Folders that belong to us, to tools, or to a writer's temporary work (an inference
    folder of ours being filled among them), never to a run."""
    return name in _SKIPPED_DIRS or bool(_TEMP_DIR.search(name)) or name.startswith(TEMP_PREFIX)


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_NAME.search(name))


def is_data_shard(name: str) -> bool:
    return bool(_DATA_SHARD.match(name))


@dataclass(frozen=True)
class Candidate:
    path: Path  # the file; a TF checkpoint's prefix (`ckpt-3`); a folder (fs.folder_layouts)
    run_dir: Path
    members: tuple[Path, ...]  # every file that makes up the checkpoint
    family: str = FILE


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str
    unreadable_folder: bool = False  # what was below it is still there, just not listable


def walk(
    start: Path, skip_dirs: frozenset[Path] = frozenset(), root: Path | None = None
) -> Iterator[Candidate | Skipped]:
    """Candidates under `start` (a folder or a single file below `root`), depth first, sorted
    by name. `start` must be reached from `root` through real folders: a symlink anywhere on
    the way could lead out of the root."""
    if start.is_symlink():
        yield Skipped(start, "symlink: not followed")
        return
    if root is not None and start != root:
        link = _symlinked_parent(root, start)
        if link is not None:
            yield Skipped(start, f"reached through a symlink ({link}): not followed")
            return
    try:
        mode = os.lstat(start).st_mode
    except FileNotFoundError:
        return  # deleted: the caller's missing pass covers what was there
    if stat_module.S_ISREG(mode):
        # The folder's other names tell whether the file is a trainer's own housekeeping.
        try:
            siblings = {
                e.name for e in os.scandir(start.parent) if e.is_file(follow_symlinks=False)
            }
        except OSError:
            siblings = {start.name}
        owner = folder_layouts.claim_of(start.parent)
        if owner is not None and start in owner.members:  # a file of a folder checkpoint
            yield _folder_candidate(start.parent, owner)
            return
        yield from _file_candidates(start.parent, [start.name], siblings)
        return
    if not stat_module.S_ISDIR(mode):
        yield Skipped(start, _special_file(mode))
        return
    stack = [start]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            yield Skipped(folder, f"folder unreadable: {exc.strerror}", unreadable_folder=True)
            continue
        names = {e.name for e in entries}
        if any(marker in names for marker in SAVED_MODEL_MARKERS):
            yield Candidate(folder, folder.parent, tuple(_tree_files(folder)), SAVED_MODEL)
            continue
        claimed = _claim(folder, entries)
        if claimed is not None:
            yield _folder_candidate(folder, claimed)
            if claimed.whole:
                continue
        files = []
        for entry in entries:
            if entry.is_symlink():
                yield Skipped(Path(entry.path), "symlink: not followed")
            elif entry.is_dir(follow_symlinks=False):
                path = Path(entry.path)
                if not is_skipped_dir(entry.name) and path not in skip_dirs:
                    stack.append(path)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry.name)
            elif entry.name.lower().endswith(families.suffixes()):
                with suppress(FileNotFoundError):
                    mode = entry.stat(follow_symlinks=False).st_mode
                    yield Skipped(Path(entry.path), _special_file(mode))
        if claimed is None:
            yield from _file_candidates(folder, files)
        stack.sort(reverse=True)


def _claim(folder: Path, entries: list[os.DirEntry[str]]) -> folder_layouts.Claim | None:
    files = frozenset(
        e.name for e in entries if e.is_file(follow_symlinks=False) and not is_temp_name(e.name)
    )
    dirs = frozenset(e.name for e in entries if e.is_dir(follow_symlinks=False))
    return folder_layouts.claim(folder, files, dirs)


def _folder_candidate(folder: Path, claimed: folder_layouts.Claim) -> Candidate:
    # A whole folder is one checkpoint of the run above it; a folder that also holds other
    # checkpoints' folders (a Trainer's output_dir) is a checkpoint of its own run.
    run_dir = folder.parent if claimed.whole else folder
    return Candidate(folder, run_dir, claimed.members, claimed.family)


def _symlinked_parent(root: Path, start: Path) -> Path | None:
    """The first symlink on the way from `root` down to `start`'s folder, if any."""
    try:
        parts = start.relative_to(root).parts
    except ValueError:
        return start
    folder = root
    for part in parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return folder
    return None


def _special_file(mode: int) -> str:
    kinds = ((stat_module.S_ISFIFO, "a FIFO"), (stat_module.S_ISSOCK, "a socket"))
    kind = next((text for test, text in kinds if test(mode)), "a device or special file")
    return f"not a regular file ({kind}): never opened"


def _file_candidates(
    folder: Path, names: list[str], siblings: set[str] | None = None
) -> Iterator[Candidate | Skipped]:
    present = set(names)
    # A BackupAndRestore folder holds the trainer's crash-recovery state, rewritten at every
    # save and deleted when training ends: never the run's checkpoints, never retention's.
    backup = backup_state_names(folder.name, present if siblings is None else siblings)
    for name in names:
        if is_temp_name(name):
            continue
        path = folder / name
        if name in backup:
            if name.endswith(".index") or name.lower().endswith(families.suffixes()):
                yield Skipped(folder / name.removesuffix(".index"), BACKUP_STATE)
        elif name.endswith(".index"):
            prefix = name[: -len(".index")]
            members = tf_members(folder, prefix, present)
            if members is not None:
                yield Candidate(folder / prefix, folder, members, TF_CHECKPOINT)
        elif name.lower().endswith(families.suffixes()):
            yield Candidate(path, folder, (path,))


def tf_members(folder: Path, prefix: str, present: set[str]) -> tuple[Path, ...] | None:
    """The index and data shards of TF checkpoint `prefix`, or None if it is not one."""
    shards = [n for n in present if (m := _DATA_SHARD.match(n)) and m["prefix"] == prefix]
    if not shards and not any(n.startswith(prefix + ".data-") for n in present):
        # An `.index` with no data file at all is not a TF checkpoint we can tell apart from
        # other `.index` files, unless it is being written: the reader decides when shards show.
        return None
    return (folder / f"{prefix}.index", *sorted(folder / s for s in shards))


def _tree_files(folder: Path) -> Iterator[Path]:
    for dirpath, _dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(files):
            path = Path(dirpath) / name
            if not path.is_symlink():
                yield path


def stat_members(members: tuple[Path, ...], folder: Path | None = None) -> FileStat:
    """Size summed, newest mtime, and the first member's inode. Raises FileNotFoundError.
    A `folder` checkpoint with no file yet (a save killed as it began) is as new as the folder
    itself, with its inode (as `fsops.current_stat` reads such a folder), not of 1970."""
    if not members and folder is not None:
        st = os.stat(folder, follow_symlinks=False)
        if not stat_module.S_ISDIR(st.st_mode):
            raise FileNotFoundError(f"{folder} is not a folder")
        return FileStat(size=0, mtime_ns=st.st_mtime_ns, inode=st.st_ino)
    size = 0
    newest = 0
    inode: int | None = None
    for member in members:
        st = os.stat(member, follow_symlinks=False)
        if not stat_module.S_ISREG(st.st_mode):
            raise FileNotFoundError(f"{member} is not a regular file")
        size += st.st_size
        newest = max(newest, st.st_mtime_ns)
        inode = st.st_ino if inode is None else inode
    return FileStat(size=size, mtime_ns=newest, inode=inode)


def display_path(path: Path) -> tuple[str, bool]:
    """The path as text for the catalog, and whether it is valid UTF-8.

    A name that is not UTF-8 cannot be stored faithfully: it is shown with \\x escapes and
    recorded as unreadable, so nothing ever acts on it by that name.
    """
    text = str(path)
    try:
        text.encode("utf-8")
        return text, True
    except UnicodeEncodeError:
        raw = os.fsencode(path)
        return raw.decode("utf-8", "backslashreplace"), False
