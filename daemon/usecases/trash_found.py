"""Trash records for what is in a root's trash folder without one: every byte there is listed
by `ckpt trash list`, counted by `ckpt du`, purged by `ckpt trash purge` and the disk guard.

Found by the reconcile (`recovery.reconcile_trash`: a mover killed between its rename and its
record, a trash folder of an earlier catalog of the root) and right after our own moves that
have no checkpoint row to claim first (`recovery.adopt_orphans`: version files the catalog does
not know). A checkpoint (a file, a TF set, a SavedModel folder, as discovery finds them) gets
one row for all its files; any other file one row of its own, a version file's (in the trash's
`.ckpt-versions/`) as a version of the file it keeps, so `trash restore` brings it back as one.
"""

from __future__ import annotations

import datetime as dt
import os
import stat as stat_module
import time
from collections.abc import Iterator
from pathlib import Path

from ..catalog.store import Recovery
from ..core import versions as naming
from ..core.units import iso_utc
from ..fs import discovery, fsops
from ..logs import event
from ..settings.config import RootConfig


def original_of(root: Path, batch_dir: Path, path: Path) -> Path:
    """Where a file of a trash batch was before it went (`<root>/<its path in the batch>`)."""
    return root / path.relative_to(batch_dir)


def batch_time(batch: str, batch_dir: Path) -> str:
    """When a batch went to the trash: its name says (`20261130T120000Z-<pid>`)."""
    try:
        moment = dt.datetime.strptime(batch.split("-", 1)[0], "%Y%m%dT%H%M%SZ")
        return iso_utc(moment.replace(tzinfo=dt.UTC).timestamp())
    except ValueError:
        try:
            return iso_utc(batch_dir.stat().st_mtime)
        except OSError:
            return iso_utc(time.time())


def adopt_candidate(
    recovery: Recovery, root: RootConfig, batch: str, found: discovery.Candidate, original: Path
) -> bool:
    """A checkpoint found in the trash becomes `trashed` with its trash paths; False if it has
    a record by now, its mover is still at work, or its name cannot be acted on."""
    try:
        stat = discovery.stat_members(found.members)
    except OSError:
        return False
    text, valid = discovery.display_path(original)
    if not valid:
        return False  # never acted on by that name
    batch_dir = root.path / fsops.TRASH_DIR / batch
    tf_set = found.family == discovery.TF_CHECKPOINT
    trash = {
        "paths": [str(m) for m in found.members] if tf_set else [str(found.path)],
        "at": batch_time(batch, batch_dir),
        "batch": batch,
        "members": [str(original_of(root.path, batch_dir, m)) for m in found.members]
        if tf_set
        else [text],
    }
    checkpoint_id = recovery.adopt_trashed(
        root=str(root.path),
        run=_run_of(root.path, original.parent),
        path=text,
        stat=stat,
        trash=trash,
        files=[m.name for m in found.members] if tf_set else [],
    )
    if checkpoint_id is None:  # recorded meanwhile, or its mover (another daemon) is at work
        return False
    event("trash_reconciled", path=text, checkpoint=checkpoint_id, batch=batch)
    return True


def adopt_file(
    recovery: Recovery,
    root: RootConfig,
    batch: str,
    trashed: Path,
    *,
    digest: str | None = None,
    reason: str | None = None,
) -> bool:
    """Any regular file in the trash that is not (part of) a checkpoint: a row of its own, a
    version's when its name is one (`digest`: its hash, when the caller read it; `reason`: why
    it went, when the caller moved it)."""
    try:
        stat = discovery.stat_members((trashed,))
    except OSError:
        return False  # gone meanwhile, or not a regular file: no bytes to account for
    batch_dir = root.path / fsops.TRASH_DIR / batch
    original = original_of(root.path, batch_dir, trashed)
    text, valid = discovery.display_path(original)
    if not valid:
        return False
    parts = original.relative_to(root.path).parts
    decoded = naming.original_parts(parts)
    version_of = str(root.path.joinpath(*decoded[0])) if decoded is not None else None
    if decoded is not None:  # a version belongs to the run of the file it keeps
        run_dir = root.path.joinpath(*decoded[0][:-1])
    elif parts[0] == naming.VERSIONS_DIR:  # anything else found among versions: that run too
        run_dir = root.path.joinpath(*parts[1:-1])
    else:
        run_dir = original.parent
    trash = {
        "paths": [str(trashed)],
        "at": batch_time(batch, batch_dir),
        "batch": batch,
        "members": [text],
    }
    checkpoint_id = recovery.adopt_trashed(
        root=str(root.path),
        run=_run_of(root.path, run_dir),
        path=text,
        stat=stat,
        trash=trash,
        files=[],
        version_of=version_of,
        generation=decoded[1] if decoded is not None else 1,
        digest=digest if decoded is not None else None,
        **({"reason": reason} if reason else {}),
    )
    if checkpoint_id is None:
        return False
    event("trash_reconciled", path=text, checkpoint=checkpoint_id, batch=batch)
    return True


def unrecorded_files(batch_dir: Path, known: set[str], taken: set[Path]) -> Iterator[Path]:
    """Regular files below `batch_dir` that no trash record covers: neither the file nor a
    folder above it is a known trash path, nor is it one of the checkpoints' files `taken`
    (found by discovery: adopted, or left to its mover). Symlinks are never followed."""
    for dirpath, dirnames, filenames in os.walk(batch_dir, followlinks=False):
        folder = Path(dirpath)
        if _covered(folder, batch_dir, known):
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(folder / d))
        for name in sorted(filenames):
            path = folder / name
            if str(path) in known or path in taken:
                continue
            try:
                if stat_module.S_ISREG(os.lstat(path).st_mode):
                    yield path
            except OSError:
                continue


def _covered(folder: Path, batch_dir: Path, known: set[str]) -> bool:
    while folder != batch_dir and batch_dir in folder.parents:
        if str(folder) in known:
            return True
        folder = folder.parent
    return False


def _run_of(root: Path, run_dir: Path) -> str:
    return str(run_dir.relative_to(root)) if run_dir != root else "."
