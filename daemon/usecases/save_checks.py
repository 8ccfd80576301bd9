"""The folder-save verdict at indexing time: what the reader child saw, plus what only this
host can see (the processes writing in the folder, `fs.procfs`; how long it has been left
alone), judged by `core.save_verdict`.

The child reports a save in flight as `UnfinishedSave` (its signs in the reason), and a save
not yet confirmed (Orbax without `commit_success.txt`) in a note of its info; an `ok`-looking
read is still `incomplete` while a local process writes in the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core import families
from ..core.errors import Refused
from ..core.model import CheckpointInfo, CheckpointStatus
from ..core.save_verdict import SaveObservation, SaveVerdict, judge
from ..fs import procfs
from ..settings.config import Config

UNCONFIRMED_NOTE = "unconfirmed save: "  # formats.folder_saves writes these notes


def is_folder_save(family: str) -> bool:
    """Whether the format row's completeness rule is an async save's (`core.families.SAVE`)."""
    row = families.row(family)
    return row is not None and row.completeness == families.SAVE


def unfinished(folder: Path, signs: str, config: Config, now_ns: int) -> SaveVerdict:
    """The verdict on a folder the reader found unfinished (never `complete`)."""
    seen = SaveObservation((signs,), (), writers(folder), newest_mtime_ns(folder))
    return judge(seen, now_ns, config.abandoned_after_seconds, config.settle_seconds)


def read_whole(
    folder: Path, info: CheckpointInfo, config: Config, now_ns: int
) -> tuple[CheckpointStatus, str] | None:
    """None when a folder read whole is complete; else its status and reason."""
    unconfirmed = tuple(
        n.removeprefix(UNCONFIRMED_NOTE) for n in info.notes if n.startswith(UNCONFIRMED_NOTE)
    )
    seen = SaveObservation((), unconfirmed, writers(folder), newest_mtime_ns(folder))
    verdict = judge(seen, now_ns, config.abandoned_after_seconds, config.settle_seconds)
    if verdict.status is CheckpointStatus.OK:
        return None
    return verdict.status, verdict.reason or verdict.state.value


def refuse_if_written(folder: Path) -> None:
    """Right before an abandoned save is moved: Refused while a local process has one of its
    files open for writing (its writer came back, or a slow one was never dead)."""
    held = writers(folder)
    if held:
        raise Refused(f"{folder} is being written now ({held[0]}): left where it is")


def writers(folder: Path) -> tuple[str, ...]:
    prefix = str(folder).rstrip("/") + "/"
    found = procfs.writers_under([folder])
    return tuple(
        f"pid {','.join(map(str, sorted(pids)))} writes {path.removeprefix(prefix)}"
        for path, pids in sorted(found.items())
    )


def newest_mtime_ns(folder: Path) -> int:
    """The newest mtime of the folder, its subfolders and files (a save touches some of them)."""
    try:
        newest = os.lstat(folder).st_mtime_ns
    except OSError:
        return 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime_ns)
            except OSError:
                continue
    return newest
