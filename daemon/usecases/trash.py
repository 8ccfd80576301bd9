"""The trash's use cases: `ckpt trash restore` (a trashed checkpoint back where it was) and
`ckpt trash purge` (deleted for good once its grace period is over), each on the rail
(`usecases.rail`: the run's lease, a claim or an audit event, fsops). Restore and purge hold the
run's lease, so they never act on the same files at once; a pinned trashed checkpoint is never
purged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ..catalog.store import Acting, Recovery
from ..core.errors import CkptError, UsageError
from ..core.model import Checkpoint, CheckpointStatus, TrashedCheckpoint
from ..core.units import iso_utc, parse_duration
from ..settings.config import Config
from . import guards, rail
from .tier import remote_trash
from .tier.locations import uses_remote
from .tier.remote_verify import before_purge


def restore(config: Config, store: Acting, ref: str, actor: str) -> Checkpoint:
    """Put the trashed checkpoint `ref` (an id, or the path it had) back at its path."""
    c = store.reads.get(trashed_ref(store.recovery, ref))
    info = c.details.get("trash") or {}
    local = c.status == CheckpointStatus.TRASHED and bool(info.get("paths"))
    remote = remote_trash.restore(config, store, c, actor)  # its copies in the store's trash
    if not local and not remote:
        raise UsageError(f"{c.path} is {c.status.value}, not in the trash")
    if local:
        rail.restore_trashed(config, store, c, actor)
    return store.reads.get(str(c.id))


def purge(
    config: Config,
    store: Acting,
    *,
    older_than: float,
    dry_run: bool = False,
    actor: str,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[list[TrashedCheckpoint], list[dict[str, Any]]]:
    """Delete trashed checkpoints trashed more than `older_than` seconds ago (never a pinned
    one), then the remote copies in the stores' trash as old. A checkpoint whose remote copy
    is its other copy keeps its local one when that copy, read back now, is gone or differs
    (`remote_verify.before_purge`: a failure, the copy marked). `should_stop` is asked before
    each item. Returns (purged, failures)."""
    cutoff = iso_utc(time.time() - older_than)
    trashed = store.acts.trashed(include_pinned=False)
    due = [t for t in trashed if t.trashed_at <= cutoff]
    remote: tuple[list[TrashedCheckpoint], list[dict[str, Any]]] = ([], [])
    if uses_remote(config):
        remote = remote_trash.purge(
            config, store, cutoff=cutoff, dry_run=dry_run, actor=actor, should_stop=should_stop
        )
    if dry_run:
        return due + remote[0], []
    purged, failures = list(remote[0]), list(remote[1])
    for item in due:
        if should_stop():
            break
        try:
            kept = before_purge(config, store, item.id, actor=actor)
            if kept is not None:
                failures.append({"id": item.id, "path": item.path, "error": kept})
                continue
            rail.purge_trashed(config, store, item, actor)
            purged.append(item)
        except (CkptError, OSError) as exc:
            failures.append({"id": item.id, "path": item.path, "error": guards.one_line(exc)})
    return purged, failures


def parse_older_than(text: str | None, config: Config) -> float:
    """`--older-than`: None (not given) means the config's grace period; any text given, an
    empty one included, must be a duration (a mistyped `--older-than "$DAYS"` never purges
    by the default silently)."""
    try:
        return config.purge_after_seconds if text is None else parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None


def trashed_ref(recovery: Recovery, ref: str) -> str:
    """`ckpt trash restore REF`: an id, or the original path of a trashed checkpoint (found
    even when a new file, with its own row, is at that path now)."""
    if ref.isdigit():
        return ref
    ids = recovery.trashed_at(os.path.abspath(ref))
    if len(ids) > 1:
        listed = ", ".join(map(str, ids))
        raise UsageError(
            f"{len(ids)} trashed checkpoints were at {ref}: restore one by id ({listed})"
        )
    return str(ids[0]) if ids else ref
