"""The known run folders of a root, indexed by parent: for every folder above a run, the names of
its children that lead to one. Log discovery asks two questions of every folder it meets, "is
this a run or above one?" (never enter it) and "does a run off this run's branch share this
folder?" (its logs are nobody's in particular); with the index each is a dict lookup, not a pass
over every run, so a scan's per-run log signature stays flat in the number of runs.

Build one per scan and `add` runs as they are found: it serves every run of the root, because
the questions exclude the asking run's own branch themselves (a run, or a folder above it, in
the index changes no answer for that run). Paths are made absolute (`os.path.abspath`, no
filesystem access besides the working directory) and kept as text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_NONE: frozenset[str] = frozenset()


class RunIndex:
    def __init__(self, runs: Iterable[Path | str] = ()) -> None:
        self._runs: set[str] = set()
        self._below: dict[str, set[str]] = {}  # folder -> names of its children leading to a run
        for run in runs:
            self.add(run)

    def add(self, run: Path | str) -> None:
        """Index a run folder: O(its depth) the first time, then only until a known parent."""
        path = os.path.abspath(run)
        if path in self._runs:
            return
        self._runs.add(path)
        child = path
        while True:
            parent, name = os.path.split(child)
            if not name:
                return  # the filesystem root
            names = self._below.setdefault(parent, set())
            if name in names:
                return  # everything above was indexed with an earlier run
            names.add(name)
            child = parent

    def __len__(self) -> int:
        return len(self._runs)

    def is_run_or_above_one(self, folder: Path) -> bool:
        key = str(folder)
        return key in self._runs or key in self._below

    def branches(self, folder: Path) -> frozenset[str] | set[str]:
        """The names of `folder`'s children that are a run or lead to one (do not modify)."""
        return self._below.get(str(folder), _NONE)

    def shared_off(self, folder: Path, branch: str) -> bool:
        """Whether a run below `folder` lies off its child `branch` (another experiment)."""
        names = self.branches(folder)
        return len(names) > (branch in names)


def as_index(runs: Iterable[Path | str] | RunIndex) -> RunIndex:
    """`runs` itself when already an index (the caller's, reused across a scan), else one built
    from them: O(len(runs)), once per call."""
    return runs if isinstance(runs, RunIndex) else RunIndex(runs)
