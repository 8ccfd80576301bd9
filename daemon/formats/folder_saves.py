"""Folder saves as the verdict sees them: an Orbax step folder or a DCP folder, read and observed.

`look(folder)` reads the folder's metadata (`formats.orbax_step`, `formats.dcp_folder`) and
gathers what `core.save_verdict` judges: the signs of an unfinished save, the local processes
writing in it (`fs.procfs`), the newest mtime below it. A metadata file that cannot be what
its writer renames into place (a hostile or broken DCP `.metadata`) is a `problem`: the
folder is corrupt, with that reason, never loaded.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CorruptCheckpoint, UnfinishedSave
from ..core.model import CheckpointInfo, Format
from ..core.save_verdict import SaveObservation
from ..fs import procfs
from . import dcp_folder, orbax_step

_TRAILING_NUMBER = re.compile(r"(\d+)$")  # DCP records no step: `step-7`, `checkpoint_100`


@dataclass(frozen=True)
class FolderSave:
    path: Path
    format: Format
    step: int | None
    info: CheckpointInfo | None  # None when the metadata is not there (yet) or refused
    seen: SaveObservation
    files: tuple[str, ...]  # every regular file below the folder, relative to it
    problem: str | None = None  # the folder's metadata is broken or hostile: corrupt
    metrics: tuple[tuple[str, float], ...] = ()


def kind_of(folder: Path) -> Format | None:
    """Which folder save `folder` is, from its name and entries (no file is read)."""
    if orbax_step.is_step_folder(folder):
        return Format.ORBAX
    if dcp_folder.is_dcp_folder(folder):
        return Format.TORCH_DCP
    return None


def look(folder: Path, root: Path | None = None, *, writers: bool = True) -> FolderSave:
    """What `folder` shows; `writers`: also the local processes writing in it (a walk of
    /proc: the reader child skips it, the indexer looks for itself, `usecases.save_checks`)."""
    kind = kind_of(folder)
    if kind is Format.ORBAX:
        return _look_orbax(folder, root, writers)
    if kind is Format.TORCH_DCP:
        return _look_dcp(folder, root, writers)
    raise CorruptCheckpoint(f"{folder.name} is neither an Orbax step folder nor a DCP folder")


UNCONFIRMED_NOTE = "unconfirmed save: "  # usecases.save_checks judges it by the age


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """The reader of `formats.folder_readers` (in the reader child): the folder's info, with
    `step` and metrics recorded, when it shows no sign of a save in flight; UnfinishedSave
    naming the signs (the indexer judges incomplete or abandoned), CorruptCheckpoint for a
    broken or hostile metadata file. An unconfirmed sign (no commit marker) rides in a note."""
    save = look(folder, root, writers=False)
    if save.problem is not None:
        raise CorruptCheckpoint(save.problem)
    if save.seen.unfinished:
        raise UnfinishedSave("; ".join(save.seen.unfinished[:3]))
    if save.info is None:
        raise CorruptCheckpoint(f"{folder.name}: no metadata to read")
    recorded = dict(save.info.recorded or {})
    if save.step is not None:
        recorded["step"] = save.step
    if save.metrics:
        recorded["metrics"] = dict(save.metrics)
    notes = (*save.info.notes, *(UNCONFIRMED_NOTE + sign for sign in save.seen.unconfirmed))
    return dataclasses.replace(save.info, recorded=recorded or None, notes=notes)


def _look_orbax(folder: Path, root: Path | None, with_writers: bool) -> FolderSave:
    files, newest = _tree(folder)
    writers = _writers(folder) if with_writers else ()
    try:
        step = orbax_step.read_step(folder, root)
    except CorruptCheckpoint as exc:
        # `_CHECKPOINT_METADATA` is written first and rewritten at commit: unreadable while a
        # writer is at it, so an unfinished sign, not a verdict of corruption
        parsed = orbax_step.step_of(folder.name)
        signs = (
            [f"Orbax's in-flight name ({orbax_step.TMP_SUFFIX})"] if parsed and parsed[1] else []
        )
        signs.append(f"metadata not readable yet: {exc}")
        seen = SaveObservation(tuple(signs), (), writers, newest)
        return FolderSave(folder, Format.ORBAX, parsed[0] if parsed else None, None, seen, files)
    unfinished = []
    if step.in_flight:
        unfinished.append(f"Orbax's in-flight name ({orbax_step.TMP_SUFFIX})")
    if step.commit_timestamp_ns is None:
        unfinished.append(f"{orbax_step.STEP_METADATA} has no commit timestamp")
    unconfirmed = () if step.committed else (f"no {orbax_step.COMMIT_MARKER}",)
    seen = SaveObservation(tuple(unfinished), unconfirmed, writers, newest)
    info = orbax_step.info_of(step)
    metrics = tuple(sorted(step.metrics.items()))
    return FolderSave(folder, Format.ORBAX, step.step, info, seen, files, metrics=metrics)


def _look_dcp(folder: Path, root: Path | None, with_writers: bool) -> FolderSave:
    files, newest = _tree(folder)
    writers = _writers(folder) if with_writers else ()
    if dcp_folder.METADATA not in files:
        sign = "no .metadata (its coordinator writes it last)"
        seen = SaveObservation((sign,), (), writers, newest)
        return FolderSave(folder, Format.TORCH_DCP, None, None, seen, files)
    try:
        dcp = dcp_folder.read_folder(folder, root)
    except CorruptCheckpoint as exc:
        seen = SaveObservation((), (), writers, newest)
        return FolderSave(folder, Format.TORCH_DCP, None, None, seen, files, problem=str(exc))
    seen = SaveObservation(dcp.problems, (), writers, newest)
    number = _TRAILING_NUMBER.search(folder.name)
    step = int(number[1]) if number else None
    return FolderSave(folder, Format.TORCH_DCP, step, dcp_folder.info_of(dcp), seen, files)


def _writers(folder: Path) -> tuple[str, ...]:
    prefix = str(folder).rstrip("/") + "/"
    found = procfs.writers_under([folder])
    return tuple(
        f"pid {','.join(map(str, sorted(pids)))} writes {path.removeprefix(prefix)}"
        for path, pids in sorted(found.items())
    )


def _tree(folder: Path) -> tuple[tuple[str, ...], int]:
    """Every regular file below `folder` (relative, sorted) and the newest mtime of it all."""
    files: list[str] = []
    try:
        newest = os.lstat(folder).st_mtime_ns
    except OSError:
        newest = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            newest = max(newest, st.st_mtime_ns)
            if name in filenames and os.path.isfile(path) and not os.path.islink(path):
                files.append(os.path.relpath(path, folder))
    return tuple(sorted(files)), newest
