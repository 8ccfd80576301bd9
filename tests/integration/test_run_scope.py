"""`--run exp` covers `exp` and the runs below it (`exp/checkpoints`), never a sibling sharing
its prefix (`exp2`, `exp-b`): the same answers from the Store and from the sqlite3 fast path,
on a real catalog of real checkpoints."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog.sqlite_reads import SqliteReads
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import NotFound
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.settings import config as config_module
from tests.support import Workspace

pytestmark = pytest.mark.slow

# The val_loss in each name is what the catalog knows: the lowest is in a sibling run.
LAYOUT = {
    "exp": ["weights.01-0.80.hdf5"],
    "exp/checkpoints": ["weights.01-0.70.hdf5", "weights.02-0.50.hdf5"],
    "exp/ckpt/fold1": ["weights.03-0.60.hdf5"],
    "exp2": ["weights.01-0.10.hdf5"],
    "exp-b": ["weights.01-0.20.hdf5"],
    "exp.b": ["weights.01-0.25.hdf5"],
    "ex": ["weights.01-0.30.hdf5"],
    "a%_": ["weights.01-0.90.hdf5"],
    "ab_": ["weights.01-0.05.hdf5"],
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> str:
    ws = Workspace(tmp_path_factory.mktemp("run-scope"))
    source = keras_checkpoints / "tfk" / "run_h5" / "weights.01-1.69.hdf5"
    for run, names in LAYOUT.items():
        (ws.root / run).mkdir(parents=True)
        for name in names:
            shutil.copyfile(source, ws.root / run / name)
    ws.run("scan")
    return str(config_module.load(str(ws.config)).database)


@pytest.fixture
def both(catalog: str) -> Any:
    store = Store(catalog)
    reads = SqliteReads.open(catalog)
    assert reads is not None
    yield store, reads
    reads.close()
    store.close()


def _names(found: list[Any]) -> set[str]:
    return {f"{c.run}/{os.path.basename(c.path)}" for c in found}


@pytest.mark.parametrize(
    ("run", "best", "runs"),
    [
        (
            "exp",
            "exp/checkpoints/weights.02-0.50.hdf5",
            {"exp", "exp/checkpoints", "exp/ckpt/fold1"},
        ),
        (
            "exp/",
            "exp/checkpoints/weights.02-0.50.hdf5",
            {"exp", "exp/checkpoints", "exp/ckpt/fold1"},
        ),
        ("exp/ckpt", "exp/ckpt/fold1/weights.03-0.60.hdf5", {"exp/ckpt/fold1"}),
        ("exp/checkpoints", "exp/checkpoints/weights.02-0.50.hdf5", {"exp/checkpoints"}),
        ("exp2", "exp2/weights.01-0.10.hdf5", {"exp2"}),
        ("ex", "ex/weights.01-0.30.hdf5", {"ex"}),
        ("a%_", "a%_/weights.01-0.90.hdf5", {"a%_"}),  # no LIKE: % and _ are plain characters
        (".", "ab_/weights.01-0.05.hdf5", set(LAYOUT)),  # the root covers every run
    ],
)
def test_a_run_and_the_runs_below_it_on_both_readers(
    both: Any, run: str, best: str, runs: set[str]
) -> None:
    store, reads = both
    expected = store.reads.best("val_loss", "min", run)
    assert dataclasses.asdict(reads.best("val_loss", "min", run)) == dataclasses.asdict(expected)
    assert _names([expected]) == {best}
    listed = store.reads.list(ListQuery(run=run, sort="path"))
    assert [dataclasses.asdict(c) for c in reads.list(ListQuery(run=run, sort="path"))] == [
        dataclasses.asdict(c) for c in listed
    ]
    assert {c.run for c in listed} == runs
    assert len(listed) == sum(len(LAYOUT[r]) for r in runs)


def test_a_run_with_nothing_at_or_below_it_is_not_found_alike(both: Any) -> None:
    store, reads = both
    for source in (store.reads, reads):
        with pytest.raises(NotFound, match="no ok checkpoint in run 'exp/none' has metric"):
            source.best("val_loss", "min", "exp/none")
        assert source.list(ListQuery(run="e")) == []
