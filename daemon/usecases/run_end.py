"""What the `final` trigger observes of a run (`core.pipeline.RunEnd`): its newest complete
checkpoint (the last written, kept versions aside), its last save and the saves still in flight
(from the catalog, and from its folder's entries: the disk is ahead of the catalog by the
settle time), the files some process holds open for writing in its folder (/proc, as the
completion check reads them), and the framework's own record that training finished (an HF
`trainer_state.json` at `max_steps`). Read once per run and pipeline pass (`RunEnds`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..catalog.store import Reads
from ..core.errors import NotFound
from ..core.model import Checkpoint, CheckpointStatus
from ..core.pipeline import RunEnd, trainer_ended
from ..core.query import ListQuery
from ..core.runs import ROOT_RUN
from ..fs import procfs

# Rows of saves that are (or were) on the disk: a trashed or purged one is no save of late.
_SAVES = frozenset(
    {
        CheckpointStatus.OK,
        CheckpointStatus.INCOMPLETE,
        CheckpointStatus.ABANDONED,
        CheckpointStatus.CORRUPT,
        CheckpointStatus.UNREADABLE,
    }
)


class RunEnds:
    """The runs' observations of one pipeline pass, each run read once, and /proc once per
    root (one pass over every process's descriptors, however many runs are looked at)."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads
        self._seen: dict[tuple[str, str], RunEnd] = {}
        self._writers: dict[str, list[str]] = {}  # root -> files open for writing below it

    def of(self, checkpoint: Checkpoint) -> RunEnd:
        key = (checkpoint.root, checkpoint.run)
        if key not in self._seen:
            self._seen[key] = observe(self._reads, checkpoint.root, checkpoint.run, self._written)
        return self._seen[key]

    def _written(self, root: str) -> list[str]:
        if root not in self._writers:
            found = procfs.writers_under([Path(root)]) if os.path.isdir(root) else {}
            self._writers[root] = list(found)
        return self._writers[root]


def observe(reads: Reads, root: str, run: str, written: Callable[[str], list[str]]) -> RunEnd:
    """What is seen of run `run` of `root` now; `written(root)`: the files open for writing
    below the root."""
    rows = [
        c
        for c in reads.list(ListQuery(run=run, root=root))
        if c.run == run and c.version_of is None and c.status in _SAVES
    ]
    ok = [c for c in rows if c.status == CheckpointStatus.OK]
    if not ok:
        return RunEnd(newest=None)
    newest = max(ok, key=lambda c: (c.mtime, c.id))
    try:
        details = reads.get(str(newest.id)).details or {}
    except NotFound:
        details = {}
    folder = Path(root) if run == ROOT_RUN else Path(root) / run
    files, touched = _on_disk(folder)
    # A file rewritten since its row was read (last.pt after each epoch) is a save the catalog
    # has not caught up with yet: as good as in flight.
    behind = sum(c.path in files and files[c.path] != c.mtime for c in ok)
    return RunEnd(
        newest=newest.id,
        newest_path=newest.path,
        last_save=max([c.mtime for c in rows] + touched),
        in_flight=sum(c.status == CheckpointStatus.INCOMPLETE for c in rows) + behind,
        writers=sum(path.startswith(f"{folder}/") for path in written(root)),
        trainer_ended=trainer_ended(details.get("training_config")),
    )


def _on_disk(folder: Path) -> tuple[dict[str, float], list[float]]:
    """The run folder's own entries: {path: mtime} of its files, and every entry's mtime (a
    checkpoint folder's changes when a file is made in it; a log written after the last save
    is activity too): the disk may be ahead of the catalog by the settle time."""
    files: dict[str, float] = {}
    touched: list[float] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                touched.append(st.st_mtime_ns / 1e9)
                if entry.is_file(follow_symlinks=False):
                    files[entry.path] = st.st_mtime_ns / 1e9
    except OSError:
        pass
    return files, touched
