"""Rows whose files a scan no longer finds: below a folder the scan may not list, `unreadable`
(never "deleted"); removed by their own trainer (a CheckpointManager's rotation, BackupAndRestore's
state: `core.housekeeping` decides), `removed`; anything else `missing`. Only rows at or below the
scan's start, and only after a complete walk (a stopped scan marks nothing).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..catalog.store import Index
from ..catalog.store_index import Known
from ..core import housekeeping
from ..core.model import CheckpointStatus
from ..formats.checkpoint_state import listed_checkpoints
from ..fs import discovery
from ..logs import event
from .scan_report import ScanReport

# Rows whose files are no longer at their path (retention weighs none of them either).
GONE = {
    CheckpointStatus.MISSING,
    CheckpointStatus.REMOVED,
    CheckpointStatus.TRASHED,
    CheckpointStatus.PURGED,
}


def mark(
    index: Index,
    root: Path,
    start: Path,
    unseen: list[tuple[str, Known]],
    unreadable_folders: list[tuple[str, str]],
    report: ScanReport,
    *,
    actor: str,
    rotated: Callable[[str], str | None] = lambda _path: None,
) -> None:
    """Mark the `unseen` rows (known to the catalog, not found by the walk from `start`) that
    were on disk: `unreadable` below one of `unreadable_folders` ((folder + "/", reason)),
    else `missing` or `removed` (`rotated(path)` names a trainer's own rotation: HF
    save_total_limit, Lightning save_top_k); each said in `report` and logged."""
    where = discovery.display_path(start)[0]
    prefix = where.rstrip(os.sep) + os.sep
    gone = [
        (path, known)
        for path, known in unseen
        if known.status not in GONE and (path == where or path.startswith(prefix))
    ]
    hidden: dict[str, list[tuple[str, Known]]] = {}  # below a folder we may not list
    for path, known in gone:
        why = next((r for f, r in unreadable_folders if path.startswith(f)), None)
        if why is not None:
            hidden.setdefault(why, []).append((path, known))
    for reason, rows in hidden.items():
        ids = [k.id for _p, k in rows if k.status != CheckpointStatus.UNREADABLE]
        index.mark(ids, CheckpointStatus.UNREADABLE, reason, actor_name=actor)
        report.failed += [(p, CheckpointStatus.UNREADABLE.value, reason) for p, _k in rows]
    hidden_paths = {p for rows in hidden.values() for p, _k in rows}
    gone = [(p, k) for p, k in gone if p not in hidden_paths]
    for (status, reason), rows in _why_gone(gone, report.skipped, root, rotated):
        index.mark([k.id for _p, k in rows], status, reason, actor_name=actor)
        for path, _known in rows:
            if status == CheckpointStatus.MISSING:
                report.missing.append(path)
            else:  # its own trainer removed it: not an anomaly
                report.removed.append((path, reason))
            event(status.value, path=path, reason=reason)
    _judged_again(index, unseen, prefix, where, rotated, report, actor)


def _judged_again(
    index: Index,
    unseen: list[tuple[str, Known]],
    prefix: str,
    where: str,
    rotated: Callable[[str], str | None],
    report: ScanReport,
    actor: str,
) -> None:
    """Rows marked `missing` by an earlier scan that the trainer's newer save shows were its
    own rotation: Lightning deletes the file it drops from its top-k right after saving the
    one that lists the new top-k, so a scan in between (the new file not complete yet) saw a
    deletion nothing explained. Only HF `checkpoint-N` and `.ckpt` rows are looked at again."""
    for path, known in unseen:
        if known.status != CheckpointStatus.MISSING:
            continue
        if not (path == where or path.startswith(prefix)):
            continue
        reason = rotated(path)
        if reason is None:
            continue
        index.mark([known.id], CheckpointStatus.REMOVED, reason, actor_name=actor)
        report.removed.append((path, reason))
        event(CheckpointStatus.REMOVED.value, path=path, reason=reason)


def _why_gone(
    gone: list[tuple[str, Known]],
    skipped: list[tuple[str, str]],
    root: Path,
    rotated: Callable[[str], str | None],
) -> list[tuple[tuple[CheckpointStatus, str], list[tuple[str, Known]]]]:
    """Vanished rows grouped by verdict: `missing`, or `removed` by their own trainer (a
    CheckpointManager's rotation, BackupAndRestore's state), decided by `core.housekeeping`."""
    backup = {p for p, r in skipped if r == housekeeping.BACKUP_STATE}
    states: dict[str, tuple[bool, frozenset[str] | None]] = {}  # folder: exists, state file
    verdicts: dict[tuple[CheckpointStatus, str], list[tuple[str, Known]]] = {}
    for path, known in gone:
        folder = os.path.dirname(path)
        if folder not in states:
            exists = os.path.isdir(folder) and not os.path.islink(folder)
            states[folder] = (exists, listed_checkpoints(Path(folder), root) if exists else None)
        exists, listed = states[folder]
        verdict = housekeeping.why_gone(
            path, listed, folder_exists=exists, backup_state=path in backup
        )
        if verdict[0] == CheckpointStatus.MISSING and (why := rotated(path)):
            verdict = (CheckpointStatus.REMOVED, why)  # HF / Lightning rotation (trainer_keeps)
        verdicts.setdefault(verdict, []).append((path, known))
    return list(verdicts.items())
