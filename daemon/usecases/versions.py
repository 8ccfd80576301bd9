"""Never lose the best: keep each completed generation of a file rewritten in place, and put
an old generation back (`ckpt restore PATH --version N`).

The indexer calls `capture` right after it recorded a generation, so the copy is made while the
trainer is busy with its next epoch (measured: bench/version_capture.py; docs/versions.md).
The copy is verified against the hash the indexer read before it gets its name; a trainer that
rewrites the file during the copy makes the hash differ, and that generation is logged as lost,
never kept torn. After a crash, our temp copies are removed with every other temp of ours
(`fsops.remove_stale_temps`), and a version file that got its name but not its row is adopted
or moved to the trash (`recovery.adopt_orphans`). A version's name that would not fit in a file
name (255 bytes) is refused with the reason (`version_lost`), never shortened: it must say what
it keeps.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..catalog.store import Acting, Index, Reads, Versions
from ..catalog.store_versions import NOT_COPIED, Source, content_hashes
from ..core import versions as naming
from ..core.errors import NotFound, Refused, UsageError, WouldReplace
from ..core.model import Checkpoint, CheckpointStatus, FileStat, Format
from ..fs import fsops, name_limits
from ..fs.discovery import stat_members
from ..fs.hashing import hash_files
from ..logs import event
from ..settings.config import Config, RootConfig
from . import guards, rail
from .copy_room import check_copy


class _Torn(Exception):
    """The copy does not hold the bytes that were indexed: the file was rewritten meanwhile."""


def capture(
    config: Config,
    store: Acting,
    versions: Versions,
    root: RootConfig,
    checkpoint_id: int,
    *,
    actor: str,
    mode: str | None = None,
    force: bool = False,
) -> str | None:
    """Keep a verified copy of the generation the checkpoint's file holds now, if its name and
    `versions.capture` (or `mode`) ask for it (`force`: whatever they say) and no copy of those
    bytes is kept yet. Returns the version's path, or None. Never raises for a file that
    changed or vanished, nor for a version's name that cannot fit: logged (`version_lost`)."""
    source = versions.version_source(checkpoint_id)
    if source is None or source.version_of is not None or source.hash is None:
        return None
    if source.status != CheckpointStatus.OK.value or source.hash in source.kept_hashes:
        return None  # not complete, or these bytes are kept already (a restore, a re-save)
    original = Path(source.path)
    mode = mode or config.versions.capture
    if not force and not naming.should_capture(mode, original.name, source.generation):
        return None
    if not force and _not_worth_a_copy(store.reads, versions, root, source, actor):
        return None
    target = root.path.joinpath(
        *naming.version_parts(fsops.relative_parts(root.path, original), source.generation)
    )
    if _skipped_for_space(config, store, versions, root, source, actor):
        return None
    started = time.monotonic()
    what = f"the version of its generation {source.generation}"

    def verify(temp: Path) -> None:
        if hash_files([temp], root.path) != source.hash:
            raise _Torn(f"{original} was rewritten while generation {source.generation} was copied")

    try:
        name_limits.check_fits(target.name, what, source.path)
        how = rail.copy_generation(root, original, target, verify)
    except WouldReplace:
        return _adopt_existing(versions, root, source, target, actor)
    except (_Torn, Refused, OSError) as exc:
        event(
            "version_lost",
            level=logging.WARNING,
            path=source.path,
            generation=source.generation,
            reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        return None
    versions.add_version(source, str(target), stat_members((target,)), how=how, actor_name=actor)
    event(
        "version_kept",
        path=source.path,
        generation=source.generation,
        version=str(target),
        how=how,
        seconds=round(time.monotonic() - started, 3),
    )
    return str(target)


def _not_worth_a_copy(
    reads: Reads, versions: Versions, root: RootConfig, source: Source, actor: str
) -> bool:
    """A version costs only what it saves (issue 39): a generation whose content is a
    checkpoint kept at another path (`last.pt` beside `ckpt_epoch007.pt`: the same tensors and
    structure, `same_content`) is recorded as that checkpoint, with no copy; a rolling
    pointer's generation (`last.pt`, `latest.pth`: the newest training moment when written) is
    not copied unless its metric beats every checkpoint of the run. Audited once per
    generation (`version-not-copied`)."""
    from .retention_plan import run_checkpoints

    row = reads.get(str(source.id))
    siblings = [
        c
        for c in run_checkpoints(reads, row.root, row.run)
        if c.version_of is None and c.path != source.path and c.status == CheckpointStatus.OK
    ]
    same = same_content(root, source, siblings)
    if same is not None:
        why = f"its content is {same} (the same tensors and structure): not copied"
    elif naming.is_rolling_pointer(Path(source.path).name) and not _beats_every(row, siblings):
        why = "a rolling pointer (rewritten at every save) whose metric beats no kept checkpoint"
    else:
        return False
    if versions.record_capture_skipped(
        source.id, source.generation, source.path, why, 0, actor, action=NOT_COPIED
    ):
        event("version_not_copied", path=source.path, generation=source.generation, reason=why)
    return True


def same_content(root: RootConfig, source: Source, siblings: list[Checkpoint]) -> str | None:
    """The path of a checkpoint among `siblings` (ok, of the source's run) holding what the
    source's generation holds: the same bytes, or for `torch.save` zips the same content
    (`torch_zip.content_identity`, read from each file as it is on disk now, the source's
    only while it is still the generation indexed). None: no such one, or it cannot say."""
    for c in siblings:
        if c.hash is not None and c.hash == source.hash:
            return c.path
    if not source.path.endswith(_TORCH_SUFFIXES):
        return None
    mine = _content(root, Path(source.path), source.stat)
    if mine is None:
        return None
    for path in _torch_beside(source.path, siblings):
        if _content(root, Path(path), None) == mine:
            return path
    return None


_TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar")
_LOOKED_AT = 16  # torch files beside the source read for their content, newest first


def _torch_beside(path: str, siblings: list[Checkpoint]) -> list[str]:
    """The run's torch zips, and the torch files in the source's folder the catalog has not
    indexed yet (a trainer's epoch file saved just before, the scan not there yet), newest
    first: the likeliest to hold the same content."""
    found = {c.path: c.mtime for c in siblings if c.format == Format.TORCH_ZIP}
    folder = os.path.dirname(path)
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                full = os.path.join(folder, entry.name)
                if (
                    full != path
                    and entry.name.endswith(_TORCH_SUFFIXES)
                    and entry.is_file(follow_symlinks=False)
                ):
                    found.setdefault(full, entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        pass
    return sorted(found, key=lambda p: found[p], reverse=True)[:_LOOKED_AT]


def _content(root: RootConfig, path: Path, expected: FileStat | None) -> str | None:
    """The content identity of the torch zip at `path` (None: unknown), read beneath the root
    (never through a planted symlink); with `expected`, only if the file is still that."""
    from ..formats import torch_zip
    from ..fs import beneath

    try:
        fd = beneath.open_regular(path, root.path)
    except (Refused, OSError):
        return None
    with os.fdopen(fd, "rb") as raw:
        info = os.fstat(raw.fileno())
        if expected is not None and FileStat(info.st_size, info.st_mtime_ns, info.st_ino) != (
            expected
        ):
            return None  # rewritten since indexed: the copy path judges it (hash check)
        return torch_zip.content_identity(raw)


def _beats_every(row: Checkpoint, siblings: list[Checkpoint]) -> bool:
    """The generation's val_loss (else loss) is better than every other checkpoint's of the
    run (lower; missing elsewhere counts as beaten): what keras#17012 would lose."""
    metric = next((m for m in ("val_loss", "loss") if row.metrics.get(m) is not None), None)
    value = row.metrics.get(metric) if metric is not None else None
    if metric is None or value is None:
        return False
    others = [c.metrics.get(metric) for c in siblings]
    return all(v is None or value < v for v in others)


def _skipped_for_space(
    config: Config, store: Acting, versions: Versions, root: RootConfig, source: Source, actor: str
) -> bool:
    """Our copy never takes the space a trainer needs (core.space_reserve): below the file's
    size plus the reserve, or plus `min_free` where that is more (usecases.copy_room), once
    versions in the trash are purged to make room, this
    generation is not kept; logged, and audited as `capture-skipped` (the
    `ckpt_capture_skipped_total` counter)."""
    from . import copy_room, space_reserve

    why = copy_room.capture_refusal(config, store.usage, root, source.stat.size)
    if why is not None and space_reserve.make_room(
        config, store, root, source.stat.size, actor=actor
    ):
        why = copy_room.capture_refusal(config, store.usage, root, source.stat.size)
    if why is None:
        why = space_reserve.budget_refusal(config, store, root, source.stat.size, actor=actor)
    if why is None:
        return False
    first = versions.record_capture_skipped(
        source.id, source.generation, source.path, why, source.stat.size, actor
    )
    event(  # once per generation as a warning; a later scan's retry skipped again: debug
        "capture_skipped",
        level=logging.WARNING if first else logging.DEBUG,
        path=source.path,
        generation=source.generation,
        reason=why,
    )
    return True


def _adopt_existing(
    versions: Versions, root: RootConfig, source: Source, target: Path, actor: str
) -> str | None:
    """A version file with this name exists without a row (our crash between its rename and
    its row): kept if it holds the bytes, else left for `adopt_orphans` to judge."""
    if str(target) in versions.version_files(str(root.path)):
        return None
    try:
        same = hash_files([target], root.path) == source.hash
    except (Refused, OSError):
        return None
    if not same:
        return None
    stat = stat_members((target,))
    versions.add_version(source, str(target), stat, how="adopted", actor_name=actor)
    return str(target)


def restore_version(
    config: Config,
    store: Acting,
    versions: Versions,
    path: str,
    *,
    generation: int | None = None,
    epoch: int | None = None,
    actor: str,
    index: Callable[[Path], object],
) -> None:
    """Put a kept generation of `path` back at `path`: the generation there now is kept first,
    then the version is copied beside the file, verified and swapped in atomically (only if
    the file is still what was kept: a trainer's save meanwhile wins). Audited. The caller
    re-indexes `path` afterwards (its row then describes the generation put back).

    "The generation there now" is the file on disk, not the catalog's last look at it: a save
    nobody indexed yet (the daemon down, a slow detection) is indexed first, with `index` (the
    caller's scan of one file, the indexer sitting above this module), and kept; one that
    cannot be (still being written) is a refusal (Refused, exit 3), nothing changed."""
    absolute = os.path.abspath(path)
    root = config.root_for(Path(absolute))
    if root is None:
        raise UsageError(f"{path} is not inside a configured root ({config.source})")
    chosen = _chosen(store.reads, versions, absolute, generation, epoch)
    if store.reads.get(absolute).version_of is not None:
        raise UsageError(f"{path} is itself a kept version: give the file it keeps")
    current, here = _as_indexed(store.reads, store.index, root, absolute, index)
    holds = content_hashes(current.hash, current.details)  # compressed since: the same
    if chosen.hash in holds:
        raise UsageError(f"{path} already holds generation {chosen.generation}: nothing to do")
    if current.status == CheckpointStatus.OK:
        capture(config, store, versions, root, current.id, actor=actor, force=True)
        if not holds & {v.hash for v in versions.versions_of(absolute)}:
            raise Refused(f"{path}: its current generation could not be kept first; not restored")
    # Its copy is written beside the file before the swap: the same room as any copy of ours.
    check_copy(
        config, store.usage, Path(absolute), chosen.size_bytes, "the restored version", actor=actor
    )
    rail.put_version_back(
        config,
        store,
        root,
        Path(absolute),
        current,
        chosen,
        here=here,
        reason=f"generation {chosen.generation} (epoch {_dash(chosen.epoch)}) from {chosen.path}",
        actor=actor,
    )


def _as_indexed(
    reads: Reads, catalog_index: Index, root: RootConfig, path: str, index: Callable[[Path], object]
) -> tuple[Checkpoint, fsops.Identity]:
    """The file's row and which file it is on disk, once the disk holds the generation that row
    describes (size, mtime, inode, and the hash when cheap: `guards.recheck`); the identity is
    taken first, so the swap replaces nothing written after this look. A file that is not that
    generation is indexed now, once; not `ok` then (a save under way, torn) it is refused: only
    a file the catalog already showed corrupt or unreadable, still as it was, is restored over
    without a copy kept (there is no good generation to keep)."""
    why = ""
    for attempt in range(2):
        here = fsops.identity(root.path, Path(path))
        if here is None:
            raise NotFound(f"{path} is not there: restore it from the trash, or copy the version")
        current = reads.get(path)
        try:
            if current.status == CheckpointStatus.OK:
                guards.recheck(catalog_index, current, root.path, [Path(path)])
            elif attempt or current.status not in (
                CheckpointStatus.CORRUPT,
                CheckpointStatus.UNREADABLE,
            ):  # one the catalog showed broken may be restored over; a new save never
                raise Refused(f"{path} is {current.status.value}")
            elif catalog_index.identity(current.id)[0] != FileStat(
                here.size, here.mtime_ns, here.inode
            ):
                raise Refused(f"{path} changed since it was indexed {current.status.value}")
            return current, here
        except Refused as exc:
            why = str(exc)
        if attempt == 0:
            index(Path(path))
    raise Refused(
        f"{path} not restored, nothing changed: it is not the generation the catalog indexed "
        f"and could not be indexed as complete now (a save under way?): {why}"
    )


def _chosen(
    reads: Reads, versions: Versions, path: str, generation: int | None, epoch: int | None
) -> Checkpoint:
    if (generation is None) == (epoch is None):
        raise UsageError("give exactly one of --version N or --epoch E")
    kept = [reads.get(str(v.id)) for v in versions.versions_of(path)]
    if generation is not None:
        found = [v for v in kept if v.generation == generation]
    else:
        found = [v for v in kept if v.epoch == epoch]
    if not found:
        listed = ", ".join(f"v{v.generation} (epoch {_dash(v.epoch)})" for v in kept) or "none"
        what = f"version {generation}" if generation is not None else f"epoch {epoch}"
        raise NotFound(f"no kept {what} of {path}; kept: {listed}")
    return max(found, key=lambda v: v.generation)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
