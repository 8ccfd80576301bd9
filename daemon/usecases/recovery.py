"""After a crash: the trash folder reconciled with the catalog, planned acts of dead processes
settled, their leases dropped. Run by every scan (so by `ckpt serve` at start, `serve --once`
and the daemon's rescans) and when a command takes over the lease of a dead process.

The disk is the truth. A checkpoint in `<root>/.ckpt-trash/<batch>/` is `trashed` (restorable,
purgeable), whatever the catalog said when its mover died. A `planned` event is closed `done`
when the disk shows the act happened (whoever planned it), and `abandoned` when it did not and
the process that planned it is gone (same host, pid not alive; an event of an older catalog,
with no pid, once it is older than any lease): `usecases.settlement`. A version file that got
its name but not its row (a crash after the rename) is adopted when its bytes are a generation
the catalog saw of its file, else moved to the trash (`adopt_orphans`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from ..catalog.store import Acting, Reads, Recovery, Versions
from ..core import versions as naming
from ..core.errors import NotFound, Refused
from ..core.model import Checkpoint
from ..fs import discovery, fsops, temp_names
from ..fs.hashing import hash_files
from ..logs import event
from ..settings.config import Config, RootConfig
from . import rail, trash_found
from .settlement import settle_events


def reconcile(
    config: Config, store: Acting, versions: Versions, roots: list[RootConfig] | None = None
) -> None:
    """The trash folder of each root (all configured roots by default), then planned events.
    The leases of dead local processes go first: a move in flight under a live lease (another
    daemon's prune) is left to its mover, a dead one's is adopted now."""
    for host, pid in store.leases.drop_dead_leases():
        event("lease_freed", host=host, pid=pid, reason="its process is gone")
    for root in config.roots if roots is None else roots:
        if root.path.is_dir():
            reconcile_trash(store.recovery, root)
            adopt_orphans(store.reads, store.recovery, versions, root, actor="ckpt reconcile")
    settle_events(config, store.recovery)  # dead processes' acts, leased or not


def reconcile_trash(recovery: Recovery, root: RootConfig) -> list[str]:
    """Give everything found in the root's trash folder a trash record: every checkpoint a
    `trashed` row with its trash paths, and every other file there (a version file, anything a
    move of ours or of an older catalog left) a row of its own (`trash_found`), so that purge
    and the disk guard see every byte of the trash. Returns their original paths."""
    trash_dir = root.path / fsops.TRASH_DIR
    try:
        batches = sorted(
            (e for e in os.scandir(trash_dir) if e.is_dir(follow_symlinks=False)),
            key=lambda e: e.name,
        )
    except OSError:
        return []
    if not batches:
        return []
    known = recovery.trash_paths(str(root.path))
    adopted = []
    taken: set[Path] = set()  # the files of every checkpoint discovery finds there
    for batch in batches:
        for found in discovery.walk(Path(batch.path)):
            if not isinstance(found, discovery.Candidate):
                continue
            taken.update(found.members)
            if str(found.path) in known or str(found.members[0]) in known:
                continue  # already a trash record (or a purge in flight)
            original = trash_found.original_of(root.path, Path(batch.path), found.path)
            if trash_found.adopt_candidate(recovery, root, batch.name, found, original):
                adopted.append(str(original))
    known = recovery.trash_paths(str(root.path))  # with what was just adopted
    for batch in batches:
        batch_dir = Path(batch.path)
        for path in trash_found.unrecorded_files(batch_dir, known, taken):
            if trash_found.adopt_file(recovery, root, batch.name, path):
                adopted.append(str(trash_found.original_of(root.path, batch_dir, path)))
    return adopted


def adopt_orphans(
    reads: Reads, recovery: Recovery, versions: Versions, root: RootConfig, *, actor: str
) -> list[str]:
    """Version files under `root` without a row (a crash after the rename): adopted when their
    bytes are a generation the catalog saw of their file, else moved to the trash (never
    deleted). Returns what was done, one line each."""
    base = root.path / naming.VERSIONS_DIR
    if not base.is_dir() or base.is_symlink():
        return []
    known = versions.version_files(str(root.path))
    done: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = Path(dirpath) / name
            if str(path) in known or name.startswith(temp_names.TEMP_PREFIX):
                continue
            try:
                done.append(_judge_orphan(reads, recovery, versions, root, path, actor))
            except (Refused, OSError) as exc:  # a symlink or FIFO planted here: never followed
                event("version_orphan_left", level=logging.WARNING, path=str(path), reason=str(exc))
                done.append(f"left alone: {path}: {exc}")
    return done


def _judge_orphan(
    reads: Reads, recovery: Recovery, versions: Versions, root: RootConfig, path: Path, actor: str
) -> str:
    parts = fsops.relative_parts(root.path, path)
    decoded = naming.original_parts(parts)
    source, digest = None, None
    if decoded is not None:
        original = str(root.path.joinpath(*decoded[0]))
        try:
            row = reads.get(original)
            source = versions.version_source(row.id)
            digest = hash_files([path], root.path)
        except (NotFound, Refused, OSError):
            source = None
        if source is not None and digest is not None and _seen(reads, row, digest):
            kept = dataclasses.replace(source, hash=digest, generation=decoded[1])
            stat = discovery.stat_members((path,))
            versions.add_version(kept, str(path), stat, how="adopted", actor_name=actor)
            event("version_adopted", path=str(path), of=original)
            return f"adopted {path}"
    why = "in .ckpt-versions without a catalog row, and no generation the catalog saw"
    trashed = rail.trash_unrecorded(recovery, root, path, digest=digest, reason=why)
    event("version_discarded", level=logging.WARNING, path=str(path), trash=str(trashed))
    return f"moved to the trash: {path}"


def _seen(reads: Reads, row: Checkpoint, digest: str) -> bool:
    full = reads.get(str(row.id))
    return any(  # its bytes, or the bytes a compress rewrote (the same generation)
        isinstance(g, dict) and digest in [g.get("hash"), *(g.get("rewritten_from") or [])]
        for g in full.details.get("generations") or []
    )
