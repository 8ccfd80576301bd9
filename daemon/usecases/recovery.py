"""After a crash: the trash folder reconciled with the catalog, planned acts of dead processes
settled, their leases dropped. Run by every scan (so by `ckpt serve` at start, `serve --once`
and the daemon's rescans) and when a command takes over the lease of a dead process.

The disk is the truth. A checkpoint in `<root>/.ckpt-trash/<batch>/` is `trashed` (restorable,
purgeable), whatever the catalog said when its mover died. A `planned` event is closed `done`
when the disk shows the act happened (whoever planned it), and `abandoned` when it did not and
the process that planned it is gone (same host, pid not alive; an event of an older catalog,
with no pid, once it is older than any lease): `usecases.settlement`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..catalog.store import Store
from ..fs import discovery, fsops
from ..logs import event
from ..settings.config import Config, RootConfig
from . import trash_found, versions
from .settlement import settle_events


def reconcile(config: Config, store: Store, roots: list[RootConfig] | None = None) -> None:
    """The trash folder of each root (all configured roots by default), then planned events.
    The leases of dead local processes go first: a move in flight under a live lease (another
    daemon's prune) is left to its mover, a dead one's is adopted now."""
    for host, pid in store.leases.drop_dead_leases():
        event("lease_freed", host=host, pid=pid, reason="its process is gone")
    for root in config.roots if roots is None else roots:
        if root.path.is_dir():
            reconcile_trash(store, root)
            versions.adopt_orphans(store, root, actor="ckpt reconcile")
    settle_events(config, store)  # dead processes' acts, leased or not


def reconcile_trash(store: Store, root: RootConfig) -> list[str]:
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
    known = store.recovery.trash_paths(str(root.path))
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
            if trash_found.adopt_candidate(store, root, batch.name, found, original):
                adopted.append(str(original))
    known = store.recovery.trash_paths(str(root.path))  # with what was just adopted
    for batch in batches:
        batch_dir = Path(batch.path)
        for path in trash_found.unrecorded_files(batch_dir, known, taken):
            if trash_found.adopt_file(store, root, batch.name, path):
                adopted.append(str(trash_found.original_of(root.path, batch_dir, path)))
    return adopted
