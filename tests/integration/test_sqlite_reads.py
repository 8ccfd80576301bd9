"""The SQLAlchemy-free hot reads (`catalog.dbapi_reads`: sqlite3 on SQLite, psycopg alone on
PostgreSQL) answer exactly as the Store does: the same rows in the same order, the same best,
latest, counts and heartbeats, on one real catalog per backend (the same rows, copied), with and
without named roots; and the hot commands on PostgreSQL never import SQLAlchemy."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.api import open_catalog
from ckpt_daemon.catalog import db
from ckpt_daemon.catalog.copy import copy_catalog
from ckpt_daemon.catalog.dbapi_reads import DbapiReads
from ckpt_daemon.catalog.postgres_reads import PostgresReads
from ckpt_daemon.catalog.sqlite_reads import SCHEMA_HEAD, SqliteReads
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import CatalogUnreachable, NotFound, UsageError
from ckpt_daemon.core.query import ListQuery, parse_condition
from ckpt_daemon.core.root_names import PathCodec
from ckpt_daemon.settings import config as config_module
from tests.support import Workspace
from tests.support.catalogs import BACKENDS, sql

pytestmark = pytest.mark.slow


SHARED = "shared"  # the root's name in the named-roots workspace


def _workspace(base: Path, keras_checkpoints: Path, *, named: bool) -> Workspace:
    """Three runs of real `.h5` checkpoints, one file gone (missing), one pinned, scanned; with
    `named`, the root has a name (its paths stored as `@shared/...`)."""
    ws = Workspace(base)
    if named:
        text = ws.config.read_text()
        line = f"  - path: {ws.root}\n"
        ws.config.write_text(text.replace(line, f"{line}    name: {SHARED}\n"))
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
    return ws


@pytest.fixture(scope="module")
def sqlite_catalog(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> str:
    """The scanned catalog's URL (left as scanned: each backend's tests read a copy)."""
    ws = _workspace(tmp_path_factory.mktemp("reads"), keras_checkpoints, named=False)
    return str(config_module.load(str(ws.config)).database)


def _copy_per_backend(request: pytest.FixtureRequest, source: str, folder: Path) -> Iterator[str]:
    """A copy of the catalog at `source` on the backend of `request.param` (rows as stored)."""
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'copy.db'}"
        copy_catalog(source, url)
        yield url
        return
    server = request.getfixturevalue("postgres")
    url = server.fresh_url(at_head=True)
    try:
        copy_catalog(source, url)
        yield url
    finally:
        server.drop(url)


@pytest.fixture(scope="module", params=BACKENDS)
def catalog(
    request: pytest.FixtureRequest, sqlite_catalog: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from _copy_per_backend(request, sqlite_catalog, tmp_path_factory.mktemp("copy"))


def open_reads(url: str, codec: PathCodec | None = None) -> DbapiReads:
    reads = (SqliteReads if url.startswith("sqlite") else PostgresReads).open(url, codec)
    assert reads is not None, f"no fast path for {url}"
    return reads


@pytest.fixture
def both(catalog: str) -> Any:
    store = Store(catalog)
    reads = open_reads(catalog)
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
    # the ordinary views (`ckpt list`, the API's list()): no versions, no off-disk rows
    ListQuery(versions=False, off_disk=False),
    ListQuery(versions=False, off_disk=False, sort="val_loss", run="exp2"),
    ListQuery(status="missing", versions=False, off_disk=False),
]


@pytest.mark.parametrize("query", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
def test_listings_are_the_stores(both: Any, query: ListQuery) -> None:
    store, reads = both
    expected = rows(store.reads.list(query))
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
    expected = dataclasses.asdict(store.reads.best(metric, mode, run))
    assert dataclasses.asdict(reads.best(metric, mode, run)) == expected
    assert expected["metric_sources"]


def test_metric_names_and_version_counts_are_the_stores(both: Any) -> None:
    store, reads = both
    assert reads.metric_names() == store.reads.metric_names() >= {"val_loss", "loss"}
    for name in ("val_loss", "loss", "val_los", ""):
        assert reads.has_metric(name) == store.reads.has_metric(name)
    paths = [c.path for c in store.reads.list(ListQuery())]
    assert reads.version_counts(paths) == store.reads.version_counts(paths)
    assert reads.version_counts([]) == store.reads.version_counts([]) == {}


def test_not_found_alike(both: Any) -> None:
    store, reads = both
    for source in (store.reads, reads):
        with pytest.raises(NotFound, match="no ok checkpoint in run 'exp9' has metric"):
            source.best("val_loss", "min", "exp9")


def test_counts_and_heartbeat_are_the_stores(both: Any) -> None:
    store, reads = both
    assert reads.count() == store.reads.count() == 5  # the missing one is not on disk
    assert reads.latest_heartbeat() is store.reads.latest_heartbeat() is None
    store.daemons.beat(None, pid=1, host="h", started_at="2026-01-01T00:00:00Z", state={"queue": 2})
    assert reads.latest_heartbeat() == store.reads.latest_heartbeat()
    assert reads.latest_heartbeat().state == {"queue": 2}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("run", "resumable"), [("exp1", False), ("exp2", False), ("exp2", True), ("exp9", False)]
)
def test_latest_is_the_stores(both: Any, run: str, resumable: bool) -> None:
    store, reads = both
    answers = []
    for source in (store.reads, reads):
        try:
            answers.append(dataclasses.asdict(source.latest(run, resumable)))
        except NotFound as exc:
            answers.append({"not found": str(exc)})
    assert answers[0] == answers[1]
    for source in (store.reads, reads):  # three runs have ok rows: which one is not a guess
        with pytest.raises(UsageError, match="several runs have ok checkpoints"):
            source.latest(None)


def test_only_a_local_sqlite_catalog_at_head_is_read_without_the_store(
    tmp_path: Path, sqlite_catalog: str
) -> None:
    catalog = sqlite_catalog
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
    expected = rows(store.reads.list(ListQuery(sort="val_loss")))
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: rows(reads.list(ListQuery(sort="val_loss"))), range(8)))
    assert found == [expected] * 8


def test_only_a_plain_postgresql_catalog_at_head_is_read_without_the_store(
    postgres: Any,
) -> None:
    catalog = postgres.fresh_url(at_head=True)
    reads = PostgresReads.open(catalog)
    assert reads is not None and reads.count() == 0
    reads.close()
    host = catalog.split("?", 1)[1]
    for url in (f"{catalog}&sslmode=disable", catalog.replace("postgresql+psycopg", "postgresql")):
        found = PostgresReads.open(url)
        assert found is not None, url
        found.close()
    # The Store's business: other drivers, unknown options, repeated keys, a host:port query.
    for url in (
        catalog.replace("postgresql+psycopg", "postgresql+asyncpg"),
        f"{catalog}&pool_size=5",
        f"{catalog}&{host}",
        catalog.split("?", 1)[0] + "?host=localhost:5432",
        f"{catalog}#x",
        catalog.replace("postgres@/", "postgres@/a%20b"),
    ):
        assert PostgresReads.open(url) is None, url
    empty = postgres.fresh_url(at_head=False)  # no schema yet: the Store creates it
    try:
        assert PostgresReads.open(empty) is None
        with pytest.raises(CatalogUnreachable) as info:  # at once, not after a second connect
            PostgresReads.open(empty.replace("/t", "/no_such_db_t"))
        assert "cannot connect to the catalog (database no_such_db_t" in str(info.value)
        assert "\n" not in str(info.value)
    finally:
        postgres.drop(empty)
        postgres.drop(catalog)


# ---- named roots: stored as `@shared/...`, read back as this host's paths, on the fast path


@pytest.fixture(scope="module")
def named_workspace(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Any:
    return _workspace(tmp_path_factory.mktemp("named"), keras_checkpoints, named=True)


@pytest.fixture(scope="module", params=BACKENDS)
def named_catalog(
    request: pytest.FixtureRequest,
    named_workspace: Workspace,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    source = str(config_module.load(str(named_workspace.config)).database)
    yield from _copy_per_backend(request, source, tmp_path_factory.mktemp("named-copy"))


def test_named_roots_read_as_the_store(named_workspace: Workspace, named_catalog: str) -> None:
    root = str(named_workspace.root)
    stored = sql(named_catalog, "SELECT path FROM checkpoints ORDER BY id")
    assert stored and all(p.startswith(f"@{SHARED}/") for (p,) in stored)
    store = Store(named_catalog, named_roots={SHARED: root})
    reads = open_reads(named_catalog, PathCodec({SHARED: root}))
    try:
        for query in (ListQuery(), ListQuery(root=root), ListQuery(run="exp2", sort="path")):
            expected = rows(store.reads.list(query))
            assert rows(reads.list(query)) == expected
        assert len(expected) == 3 and all(r["path"].startswith(f"{root}/") for r in expected)
        assert len(rows(reads.list(ListQuery(root=root)))) == 6  # a local root argument, stored
        # best and latest stat their answer beneath its root: only a local path finds the file.
        best = reads.best("val_loss", "min")
        assert dataclasses.asdict(best) == dataclasses.asdict(store.reads.best("val_loss", "min"))
        assert best.path.startswith(f"{root}/exp2/") and not best.details["skipped"]
        latest = reads.latest("exp1")
        assert dataclasses.asdict(latest) == dataclasses.asdict(store.reads.latest("exp1"))
        summaries = reads.runs()  # the runs' aggregates: their root and paths local too
        assert [dataclasses.asdict(r) for r in summaries] == [
            dataclasses.asdict(r) for r in store.reads.runs()
        ]
        assert {r.root for r in summaries} == {root}
        paths = [r.newest for r in summaries] + [p for r in summaries for p in r.best.values()]
        assert paths and all(p is not None and p.startswith(f"{root}/") for p in paths)
        started = "2026-01-01T00:00:00Z"
        store.daemons.beat(None, pid=1, host="h", started_at=started, state={"roots": [root]})
        assert sql(named_catalog, "SELECT state FROM heartbeat")[0][0] is not None
        assert reads.heartbeats() == store.reads.heartbeats()
        assert reads.heartbeats()[0].state == {"roots": [root]}
    finally:
        reads.close()
        store.close()


def test_open_catalog_keeps_the_fast_path_with_named_roots(
    named_workspace: Workspace, named_catalog: str
) -> None:
    with open_catalog(str(named_workspace.config), named_catalog) as cat:
        assert cat._reads is not None  # the Store (and SQLAlchemy) only when first needed
        assert cat._opened is None
        assert cat.best("val_loss").path.startswith(f"{named_workspace.root}/exp2/")
        assert cat._opened is None


# ---- what the hot commands import, on both backends (one child process per backend)


def test_hot_commands_on_the_catalog_import_no_sqlalchemy(
    named_workspace: Workspace, named_catalog: str
) -> None:
    """`ckpt best`, `list --run R --json`, `latest` in one child: the answers of the fast path,
    with SQLAlchemy never imported (on PostgreSQL through psycopg alone)."""
    config = str(named_workspace.config)
    script = (
        "import contextlib, io, sys\n"
        "from ckpt_daemon.cli.main import run\n"
        "for args in (['best', '--metric', 'val_loss'], ['list', '--run', 'exp1', '--json'],\n"
        "             ['latest', '--run', 'exp1']):\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        f"        code = run(['--config', {config!r}, '--db', {named_catalog!r}, *args])\n"
        "    print(code, out.getvalue().strip().splitlines()[-1][:200], file=sys.stderr)\n"
        "print('LOADED=' + ','.join(m for m in ('sqlalchemy', 'alembic') if m in sys.modules),"
        " file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(" ", 1)[0] for line in lines[:3]] == ["0", "0", "0"], done.stderr
    assert str(named_workspace.root / "exp2") in lines[0], done.stderr  # best: a local path
    assert lines[-1] == "LOADED=", done.stderr


def test_the_store_and_the_fast_path_send_the_same_sql(sqlite_catalog: str, tmp_path: Path) -> None:
    """One SQL for the hot reads (`catalog.read_sql`): every listing, `best`, `latest`, count
    and heartbeat read sends the database the very statements, parameters bound, whether it goes
    through the Store's engine or the fast path's sqlite3 connection (a new filter is written
    once)."""
    import sqlite3

    from sqlalchemy import event

    from ckpt_daemon.catalog.dbapi_reads import SQLITE

    url = f"sqlite:///{tmp_path / 'copy.db'}"
    copy_catalog(sqlite_catalog, url)
    sent: dict[str, list[str]] = {"store": [], "fast": []}
    store = Store(url)
    engine = store._engine  # the Store's own connections, traced by SQLite itself
    event.listen(
        engine, "connect", lambda conn, _rec: conn.set_trace_callback(sent["store"].append)
    )
    engine.dispose()  # the connections opened before the listener: traced ones replace them
    connection = sqlite3.connect(
        str(tmp_path / "copy.db"), isolation_level=None, check_same_thread=False
    )
    connection.set_trace_callback(sent["fast"].append)
    reads = DbapiReads(connection, SQLITE)
    try:
        for name, source in (("store", store.reads), ("fast", reads)):
            for query in QUERIES:
                source.list(query)
            paths = [c.path for c in source.list(ListQuery())]
            source.version_counts(paths)
            source.metric_names()
            source.has_metric("val_loss")
            source.best("val_loss", "min", "exp1")
            for resumable in (False, True):
                with contextlib.suppress(NotFound):
                    source.latest("exp2", resumable)
            source.count()
            source.heartbeats()
            source.latest_heartbeat()
            assert sent[name], f"nothing traced for {name}"
        statements = {
            name: [s for s in lines if not s.startswith(("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA"))]
            for name, lines in sent.items()
        }
        assert statements["store"] == statements["fast"]
        assert len(statements["fast"]) > len(QUERIES)
    finally:
        reads.close()
        store.close()


def test_runs_are_aggregated_in_sql_as_their_rows_say(both: Any) -> None:
    """`runs()` (the web overview's one read): each run's ok count, bytes, last save, newest,
    best per metric (its mode; ties: the newest) and flags, from aggregates, equal to what the
    run's own rows say, on each backend and through either way in."""
    from ckpt_daemon.core.history import best_checkpoint
    from ckpt_daemon.core.query import default_mode

    store, reads = both
    every = store.reads.list(ListQuery(off_disk=True))
    found = store.reads.runs()
    assert [dataclasses.asdict(r) for r in reads.runs()] == [dataclasses.asdict(r) for r in found]
    assert [r.name for r in found] == ["exp1", "exp2", "exp2/sub"]
    for run in found:
        mine = [c for c in every if c.run == run.name]
        ok = [c for c in mine if c.status.value == "ok"]
        assert (run.checkpoints, run.bytes) == (len(ok), sum(c.size_bytes for c in ok))
        newest = max(ok, key=lambda c: (c.mtime, c.id))
        assert run.newest == newest.path
        assert (
            run.newest_mtime_ns is not None and abs(run.newest_mtime_ns / 1e9 - newest.mtime) < 1e-3
        )
        names = {m for c in ok for m in c.metrics}
        assert set(run.best) == names and names
        for metric in names:
            best = best_checkpoint(ok, metric, default_mode(metric))
            assert best is not None
            assert (run.best[metric], run.best_values[metric]) == (best.path, best.metrics[metric])
        flagged = [c.status.value for c in mine if c.status.value not in ("ok", "trashed")]
        assert run.flags == {s: flagged.count(s) for s in flagged}
        assert not run.last_save_unfinished
    assert found[1].flags == {"missing": 1}  # exp2's deleted file
