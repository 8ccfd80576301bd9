"""The checks before any act on a checkpoint's files (trash, split, compress).

The file must be inside a configured root, and its bytes must still be the ones the catalog
indexed (size, mtime, inode, and the hash when cheap): a decision taken on a checkpoint must
never be carried out on other bytes.
"""

from __future__ import annotations

from pathlib import Path

from ..catalog.store import Index, Reads
from ..core.errors import NotFound
from ..core.families import folder_formats
from ..core.model import Checkpoint, CheckpointStatus, FileStat, Format, TrashedCheckpoint
from ..fs import fsops
from ..settings.config import Config, RootConfig
from . import folder_units

HASH_RECHECK_MAX_BYTES = 512 << 20  # re-hash before acting when that costs < ~0.5 s


def located(config: Config, index: Index, c: Checkpoint) -> tuple[Path, list[Path]]:
    """The configured root holding `c`, and every file (or folder) it is made of."""
    root, path = configured_root(config, c).path, Path(c.path)
    _stat, _digest, files = index.identity(c.id)
    if c.format == Format.TF_CHECKPOINT:
        return root, [path.parent / name for name in files]
    if c.status == CheckpointStatus.ABANDONED:  # a save's own folder: it goes whole
        return root, [path]
    if _is_layout_folder(c):
        return root, folder_units.to_move(path, files)
    return root, [path]


def _is_layout_folder(c: Checkpoint) -> bool:
    """A folder checkpoint of `fs.folder_layouts` (SavedModel folders keep their own rules),
    or an abandoned folder save (never read whole, so no format: its files are recorded)."""
    if c.format is None and c.status == CheckpointStatus.ABANDONED:
        return True
    return c.format in folder_formats() and c.format != Format.SAVED_MODEL


def recheck(
    index: Index, c: Checkpoint, root: Path, members: list[Path], *, rehash: bool = True
) -> None:
    """Skip anything whose bytes may differ from what was indexed (and decided on). `rehash`
    False: the stat only, for an act that hashes every byte it reads itself and refuses before
    it acts when they differ (the upload of `ckpt tier`)."""
    expected, digest, files = index.identity(c.id)
    if _is_layout_folder(c):  # its recorded files, compared with what is in the folder now
        folder_units.check_unchanged_names(Path(c.path), files, members)
        # No file recorded (a save killed as it began): the folder itself, as it was indexed.
        members = folder_units.member_files(Path(c.path), files) if files else [Path(c.path)]
    elif c.format == Format.SAVED_MODEL and files:  # indexed by its files (the first's inode)
        members = folder_units.member_files(Path(c.path), files)
    found = fsops.current_stat(root, members)
    if found != expected:
        raise fsops.Refused(
            f"{c.path} changed since it was indexed ({stat_diff(expected, found)}):"
            " skipped; the next scan re-indexes it"
        )
    cheap = expected.size <= HASH_RECHECK_MAX_BYTES and c.format != Format.SAVED_MODEL
    if rehash and digest and cheap:
        from ..fs.hashing import hash_files

        if hash_files(members) != digest:
            raise fsops.Refused(f"{c.path} has other bytes than when indexed: skipped")


def stat_diff(expected: FileStat, found: FileStat) -> str:
    """Which of size, mtime and inode differ (a refusal's or a verdict's why)."""
    names = [n for n in ("size", "mtime_ns", "inode") if getattr(expected, n) != getattr(found, n)]
    return ", ".join(names) + " differ"


def configured_root(config: Config, c: Checkpoint | TrashedCheckpoint) -> RootConfig:
    """The configured root `c` was indexed under, still holding its path (else refused)."""
    root = config.root_for(Path(c.path))
    if root is None or str(root.path) != c.root:
        raise fsops.Refused(f"{c.path} is not inside a configured root: never touched")
    return root


def run_id(reads: Reads, c: Checkpoint) -> int:
    for key, root, name in reads.run_keys():
        if name == c.run and root == c.root:
            return key
    raise NotFound(f"run {c.run} of {c.path} is not in the catalog")


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
