"""The SQLAlchemy-free hot reads (`catalog.sqlite_reads`) answer exactly as the Store does: the
same rows in the same order, the same best, counts and heartbeat, on one real catalog."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog import db
from ckpt_daemon.catalog.sqlite_reads import SCHEMA_HEAD, SqliteReads
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import NotFound
from ckpt_daemon.core.query import ListQuery, parse_condition
from ckpt_daemon.settings import config as config_module
from tests.support import Workspace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> str:
    """Three runs of real `.h5` checkpoints, one file gone (missing), one pinned; its URL."""
    ws = Workspace(tmp_path_factory.mktemp("reads"))
    source = keras_checkpoints / "tfk" / "run_h5"
    for run, names in {
        "exp1": ["weights.01-1.69.hdf5", "weights.02-1.68.hdf5", "weights.03-1.50.hdf5"],
        "exp2": ["weights.01-0.90.hdf5", "weights.02-0.95.hdf5"],
        "exp2/sub": ["weights.05-1.20.hdf5"],
    }.items():
        (ws.root / run).mkdir(parents=True)
        for i, name in enumerate(names):
            shutil.copyfile(source / "weights.01-1.69.hdf5", ws.root / run / name)
            os.utime(ws.root / run / name, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
        if run == "exp1":
            shutil.copyfile(source / "training.log", ws.root / run / "training.log")
    ws.run("scan")
    (ws.root / "exp2" / "weights.02-0.95.hdf5").unlink()
    ws.run("scan")
    ws.run("pin", str(ws.root / "exp1" / "weights.02-1.68.hdf5"))
    return str(config_module.load(str(ws.config)).database)


@pytest.fixture
def both(catalog: str) -> Any:
    store = Store(catalog)
    reads = SqliteReads.open(catalog)
    assert reads is not None
    yield store, reads
    reads.close()
    store.close()


def rows(found: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(c) for c in found]


QUERIES = [
    ListQuery(),
    ListQuery(sort="id", descending=True),
    ListQuery(sort="val_loss"),
    ListQuery(sort="val_loss", descending=True, limit=3),
    ListQuery(sort="loss"),
    ListQuery(sort="no_such_metric"),
    ListQuery(sort="epoch", descending=True),
    ListQuery(sort="path"),
    ListQuery(sort="run", descending=True),
    ListQuery(sort="status"),
    ListQuery(sort="size"),
    ListQuery(run="exp2"),
    ListQuery(run="exp2/sub"),
    ListQuery(status="missing"),
    ListQuery(status="ok", format="keras-legacy-h5", kind="full"),
    ListQuery(where=(parse_condition("val_loss < 1.5"),)),
    ListQuery(where=(parse_condition("val_loss >= 0.9"), parse_condition("epoch != 2"))),
    ListQuery(where=(parse_condition("size > 1KB"), parse_condition("loss == 1.0910100936889648"))),
    ListQuery(where=(parse_condition("no_such_metric > 0"),)),
    ListQuery(limit=0),
]


@pytest.mark.parametrize("query", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
def test_listings_are_the_stores(both: Any, query: ListQuery) -> None:
    store, reads = both
    expected = rows(store.list(query))
    assert rows(reads.list(query)) == expected
    if query == QUERIES[0]:
        assert len(expected) == 6 and any(r["pinned"] for r in expected)


@pytest.mark.parametrize(
    ("metric", "mode", "run"),
    [
        ("val_loss", "min", None),
        ("val_loss", "max", None),
        ("val_loss", "min", "exp1"),
        ("val_loss", "max", "exp2/sub"),
        ("loss", "min", None),
        ("accuracy", "max", "exp1"),
    ],
)
def test_best_is_the_stores(both: Any, metric: str, mode: str, run: str | None) -> None:
    store, reads = both
    expected = dataclasses.asdict(store.best(metric, mode, run))
    assert dataclasses.asdict(reads.best(metric, mode, run)) == expected
    assert expected["metric_sources"]


def test_not_found_alike(both: Any) -> None:
    store, reads = both
    for source in (store, reads):
        with pytest.raises(NotFound, match="no ok checkpoint in run 'exp9' has metric"):
            source.best("val_loss", "min", "exp9")


def test_counts_and_heartbeat_are_the_stores(both: Any) -> None:
    store, reads = both
    assert reads.count() == store.count() == 5  # the missing one is not on disk
    assert reads.latest_heartbeat() is store.latest_heartbeat() is None
    store.beat(None, pid=1, host="h", started_at="2026-01-01T00:00:00Z", state={"queue": 2})
    assert reads.latest_heartbeat() == store.latest_heartbeat()
    assert reads.latest_heartbeat().state == {"queue": 2}  # type: ignore[union-attr]


def test_only_a_local_sqlite_catalog_at_head_is_read_without_the_store(
    tmp_path: Path, catalog: str
) -> None:
    assert SCHEMA_HEAD == db.SCHEMA_HEAD
    assert SqliteReads.open(f"sqlite:///{tmp_path / 'new.db'}") is None  # the Store creates it
    assert not (tmp_path / "new.db").exists()
    assert SqliteReads.open(catalog + "?timeout=5") is None  # options: the Store's business
    assert SqliteReads.open("postgresql+psycopg://host/db") is None
    behind = tmp_path / "behind.db"
    shutil.copyfile(catalog.removeprefix("sqlite:///"), behind)
    import sqlite3

    with sqlite3.connect(behind) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    assert SqliteReads.open(f"sqlite:///{behind}") is None  # the Store refuses it (exit 5)


def test_a_catalog_opened_in_one_thread_reads_in_others(both: Any) -> None:
    """As with the Store's pool: a script may open the catalog, then query it from workers."""
    from concurrent.futures import ThreadPoolExecutor

    store, reads = both
    expected = rows(store.list(ListQuery(sort="val_loss")))
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: rows(reads.list(ListQuery(sort="val_loss"))), range(8)))
    assert found == [expected] * 8
