"""Room for our copies: every copy we write (a kept version, a split's artifact, a compressed
rewrite, a fetch, a restored version) checks first that free space stays at least its size plus
what the trainers need (core.space_reserve.room_to_keep: the root's `min_free` where that is
more than the reserve, else the reserve), and is refused with a one-line reason otherwise
(logged as `copy_refused`; a capture's refusal is audited as `capture-skipped`).

A module of its own, below the guard and the reserve's acts: the writers (artifacts, fetching,
versions) ask it without importing what frees space (which imports them).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import space_reserve
from ..core.errors import Refused
from ..core.units import format_size
from ..logs import event
from ..settings.config import Config, RootConfig

if TYPE_CHECKING:
    from ..catalog.store import UsageReads


@dataclass(frozen=True)
class Filesystem:
    """The roots on one filesystem."""

    dev: int
    roots: tuple[str, ...]


def filesystems(config: Config) -> list[Filesystem]:
    """Every root that exists, grouped by filesystem."""
    groups: dict[int, list[str]] = {}
    for root in config.roots:
        try:
            dev = os.stat(root.path).st_dev
        except OSError:
            continue
        groups.setdefault(dev, []).append(str(root.path))
    return [Filesystem(dev, tuple(paths)) for dev, paths in groups.items()]


def reserve_of(config: Config, usage: UsageReads, fs: Filesystem) -> int:
    """The reserve of `fs` in bytes, as the catalog and the filesystem are now."""
    total = _total(fs.roots[0])
    largest = usage.largest_checkpoint(fs.roots)
    return space_reserve.reserve_bytes(config.versions.reserve, total, largest)


def capture_refusal(config: Config, usage: UsageReads, root: RootConfig, size: int) -> str | None:
    """Why a copy of `size` bytes into `root` must not be made now, or None if it fits."""
    fs = next((f for f in filesystems(config) if str(root.path) in f.roots), None)
    if fs is None:
        return None  # the root is gone: the copy fails on its own, logged as lost
    st = os.statvfs(fs.roots[0])
    # The copy takes whole blocks: its size rounded up to the filesystem's block.
    blocks = -(-size // st.f_frsize) * st.f_frsize if st.f_frsize else size
    free = st.f_bavail * st.f_frsize
    keep, what = room_to_keep(config, usage, fs, root)
    return space_reserve.capture_refusal(free, blocks, keep, what)


def room_to_keep(
    config: Config, usage: UsageReads, fs: Filesystem, root: RootConfig
) -> tuple[int, str]:
    """(bytes, what they are) every copy of ours leaves free on `fs`: the reserve, or the
    root's `min_free` where that is more (core.space_reserve.room_to_keep)."""
    total = _total(fs.roots[0])
    wanted = config.min_free_for(root)
    return space_reserve.room_to_keep(
        reserve_of(config, usage, fs),
        wanted.threshold(total) if wanted is not None else None,
        wanted.describe() if wanted is not None and wanted.percent is not None else "",
    )


def check_copy(
    config: Config, usage: UsageReads, target: Path, size: int, what: str, *, actor: str
) -> None:
    """Before we write a copy of `size` bytes at `target` (a split's artifact, a compressed
    rewrite, a fetch, a restored version): Refused, with the one-line reason, logged
    (`copy_refused`), unless free space stays at least its size plus what `room_to_keep` says
    (inside a root) or its size (elsewhere: `fetch --to`)."""
    root = config.root_for(target)
    if root is not None:
        why = capture_refusal(config, usage, root, size)
    else:
        folder = next((p for p in (target, *target.parents) if p.is_dir()), Path("/"))
        st = os.statvfs(folder)
        free = st.f_bavail * st.f_frsize
        why = None if free >= size else f"free {format_size(free)} < the copy {format_size(size)}"
    if why is None:
        return
    # Info: the refusal is the caller's error (one line, exit 3) and its audit event.
    event("copy_refused", level=logging.INFO, path=str(target), what=what, reason=why, actor=actor)
    raise Refused(f"refused: {what} {target} not written: {why}")


def _total(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize
