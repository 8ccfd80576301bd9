"""Which runs a query's `--run NAME` covers: the run and every run below it; and which runs below
a shared folder a log there belongs to (pure).

A training script that saves into `exp/checkpoints/` (or `exp/ckpt/fold1/`) makes runs named
after those folders, but to its user they are experiment `exp`: `ckpt best --run exp` must
answer from them. A sibling that merely shares the prefix (`exp2`) is another experiment.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

# The character after "/" in code point order: `name >= "exp/" AND name < "exp0"` is exactly
# "below exp/", with no LIKE (run names may hold `%` and `_`).
_AFTER_SEPARATOR = chr(ord("/") + 1)
ROOT_RUN = "."  # checkpoints directly in a root; every run of the root is below it


@dataclass(frozen=True)
class RunScope:
    """`name == exact OR (low <= name < high)`; `exact` None: every run."""

    exact: str | None
    low: str = ""
    high: str = ""

    def covers(self, name: str) -> bool:
        return self.exact is None or name == self.exact or self.low <= name < self.high


def run_scope(run: str) -> RunScope:
    """The runs `run` covers; a trailing slash means the same run (`exp/` is `exp`)."""
    name = run.rstrip("/") or run
    if name == ROOT_RUN:
        return RunScope(None)
    return RunScope(name, name + "/", name + _AFTER_SEPARATOR)


def shared_log_covers(log_epochs: Collection[int], run_epochs: Collection[int]) -> bool:
    """Whether a log in a folder above several runs, naming none of them (`exp/history.csv`
    above `exp/ckpt/` and `exp/weights/`, one `fit()` writing all three), is this run's: it has
    a row for epochs the run's checkpoints name. Some, not all: a resumed job's CSVLogger
    (`append=False`) rewrites the log from the resumed epoch on, and it still covers those. A
    run naming no epoch is contradicted by no log: it takes it (its checkpoints are below it)."""
    wanted = set(run_epochs)
    return not wanted or not wanted.isdisjoint(log_epochs)
