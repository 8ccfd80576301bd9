"""The catalog itself, on a real SQLite file and a real PostgreSQL database: migrations, and
concurrent writers from processes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from ckpt_daemon.catalog import db
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord
from ckpt_daemon.core.query import ListQuery
from tests.support.catalogs import sql, tables


def test_schema_head_constant_matches_the_migrations() -> None:
    from alembic.script import ScriptDirectory

    import ckpt_daemon.migrations

    folder = Path(ckpt_daemon.migrations.__file__).parent
    assert ScriptDirectory(str(folder)).get_current_head() == db.SCHEMA_HEAD


def test_new_catalog_is_created_at_head_in_wal_mode(empty_catalog_url: str) -> None:
    url = empty_catalog_url
    store = Store(url)
    store.close()
    assert {
        "runs",
        "checkpoints",
        "metrics",
        "artifacts",
        "events",
        "leases",
        "heartbeat",
        "alembic_version",
    } <= tables(url)
    assert sql(url, "SELECT version_num FROM alembic_version") == [(db.SCHEMA_HEAD,)]
    if db.is_sqlite(url):
        path = db.sqlite_path(url)
        assert path is not None
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_every_migration_downgrades_and_upgrades_with_rows_intact(empty_catalog_url: str) -> None:
    url = empty_catalog_url
    store = Store(url)
    record(store, "/r/run/a.h5", "h1")
    store.close()
    counted = ("runs", "checkpoints", "events")
    before = {t: sql(url, f"SELECT count(*) FROM {t}")[0][0] for t in counted}
    assert before == {"runs": 1, "checkpoints": 1, "events": 1}
    backup = db.upgrade(url)  # already at head: nothing to do, no backup
    assert backup is None
    db.downgrade(url, "0001")  # every step down keeps the rows
    assert {t: sql(url, f"SELECT count(*) FROM {t}")[0][0] for t in counted} == before
    db.upgrade(url)
    assert {t: sql(url, f"SELECT count(*) FROM {t}")[0][0] for t in counted} == before
    assert sql(url, "SELECT version_num FROM alembic_version") == [(db.SCHEMA_HEAD,)]
    db.downgrade(url, "base")
    assert tables(url) <= {"alembic_version"}
    db.upgrade(url)
    assert "checkpoints" in tables(url)


def record(store: Store, path: str, digest: str) -> int:
    return store.record(
        IndexRecord(
            path=path,
            root="/r",
            run="run",
            status=CheckpointStatus.OK,
            reason=None,
            stat=FileStat(10, 1, 1),
            hash=digest,
        ),
        actor_name="test",
        at="2026-01-01T00:00:00.000Z",
    )


WRITER = """
import sys
from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.catalog.store import Store
url, worker, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = Store(url)
for i in range(n):
    for path in ("/r/run/shared.h5", f"/r/run/own-{worker}-{i}.h5"):
        store.record(IndexRecord(path=path, root="/r", run="run", status=CheckpointStatus.OK,
                                 reason=None, stat=FileStat(i, i, worker), hash=f"{worker}-{i}"),
                     actor_name=f"w{worker}", at="2026-01-01T00:00:00.000Z")
store.close()
"""


def test_concurrent_writers_from_several_processes_lose_nothing(catalog_url: str) -> None:
    """Each write of the shared path is a read-modify-write of its generation counter."""
    url = catalog_url
    Store(url).close()
    workers, n = 4, 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(w), str(n)], stderr=subprocess.PIPE, text=True
        )
        for w in range(workers)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    ((generation,),) = sql(url, "SELECT generation FROM checkpoints WHERE path='/r/run/shared.h5'")
    own = sql(url, "SELECT count(*) FROM checkpoints WHERE path LIKE '%own-%'")[0]
    ((runs,),) = sql(url, "SELECT count(*) FROM runs")
    # Every one of the workers*n writes carried a new hash: the first inserts, each later one
    # must have bumped the counter exactly once.
    assert generation == workers * n
    assert own[0] == workers * n and runs == 1


def test_nan_metrics_are_stored_as_null_and_ignored_by_best(
    catalog_url: str, tmp_path: Path
) -> None:
    from ckpt_daemon.core.model import MetricValue
    from ckpt_daemon.core.query import ListQuery

    store = Store(catalog_url)
    root = tmp_path / "r"
    (root / "run").mkdir(parents=True)
    for name, value in (("a.h5", float("nan")), ("b.h5", 0.5)):
        path = root / "run" / name
        path.write_bytes(b"x")  # best stats its answer: the file must be there, unchanged
        st = path.stat()
        store.record(
            IndexRecord(
                path=str(path),
                root=str(root),
                run="run",
                status=CheckpointStatus.OK,
                reason=None,
                stat=FileStat(st.st_size, st.st_mtime_ns, st.st_ino),
                metrics=(MetricValue("val_loss", value, "filename"),),
            ),
            actor_name="t",
            at="2026-01-01T00:00:00.000Z",
        )
    assert store.best("val_loss", "min").path == str(root / "run" / "b.h5")
    listed = {c.path: c.metrics for c in store.list(ListQuery())}
    assert listed[str(root / "run" / "a.h5")] == {"val_loss": None}
    assert json.dumps(listed[str(root / "run" / "a.h5")])  # serializable
    store.close()


def test_known_under_a_start_path_is_exactly_that_subtree(catalog_url: str) -> None:
    store = Store(catalog_url)
    for path in ("/r/run/a.h5", "/r/run/sub/b.h5", "/r/run2/c.h5", "/r/run.h5", "/r/ru/d.h5"):
        record(store, path, path)
    assert set(store.known_under("/r", "/r/run")) == {"/r/run/a.h5", "/r/run/sub/b.h5"}
    assert set(store.known_under("/r", "/r/run.h5")) == {"/r/run.h5"}
    assert len(store.known_under("/r")) == 5
    store.close()


def test_trashed_in_place_rows_are_found_by_their_json_record_on_both_backends(
    catalog_url: str,
) -> None:
    """The scan's skip list (usecases.trash_in_place): only rows trashed in place, by a JSON
    test in SQL, with the stat they were trashed with; a moved trash record is not one."""
    store = Store(catalog_url)
    for path in ("/r/run/a.h5", "/r/run/b.h5", "/r/run/c.h5", "/r/other/d.h5"):
        record(store, path, path)
    ids = {c.path: c.id for c in store.list(ListQuery())}
    for path, in_place in (("/r/run/a.h5", True), ("/r/run/b.h5", False), ("/r/other/d.h5", True)):
        trash = {"paths": [path], "members": [path], "at": "2026-01-01T00:00:00Z"}
        if in_place:
            trash |= {"in_place": True, "stat": [7, 8, 9], "members_stat": [7, 8, 9]}
        store.set_status(ids[path], CheckpointStatus.TRASHED, "test", trash=trash)
    assert store.trashed_in_place("/r") == {
        "/r/run/a.h5": FileStat(7, 8, 9),
        "/r/other/d.h5": FileStat(7, 8, 9),
    }
    assert store.trashed_in_place("/r", "/r/run") == {"/r/run/a.h5": FileStat(7, 8, 9)}
    assert store.trashed_in_place("/elsewhere") == {}
    store.close()


def test_hostile_values_are_stored_on_both_backends(catalog_url: str) -> None:
    """NaN/Infinity in `details` (PostgreSQL's json refuses them) and NUL in a name (its text
    refuses it) do not fail the write: PostgreSQL keeps null and U+FFFD, SQLite keeps them."""
    from ckpt_daemon.core.model import CheckpointInfo, Format, Kind

    store = Store(catalog_url)
    info = CheckpointInfo(
        Format.KERAS_ZIP,
        Kind.FULL,
        model_name="evil\x00name",
        training_config={"lr": float("nan"), "clip": [float("inf"), 1.5], "n": "a\x00b"},
    )
    rec = IndexRecord(
        path="/r/run/evil.keras",
        root="/r",
        run="run",
        status=CheckpointStatus.OK,
        reason="read\x00error",
        stat=FileStat(10, 1, 1),
        hash="h",
        info=info,
    )
    found = store.get(str(store.record(rec, actor_name="t", at="2026-01-01T00:00:00Z")))
    store.close()
    config = found.details["training_config"]
    assert config["n"] == "a\x00b" and config["clip"][1] == 1.5  # JSON escapes a NUL
    ((model_name, reason),) = sql(catalog_url, "SELECT model_name, reason FROM checkpoints")
    if db.is_sqlite(catalog_url):
        assert config["lr"] != config["lr"] and config["clip"][0] == float("inf")
        assert (model_name, reason) == ("evil\x00name", "read\x00error")
    else:
        assert config["lr"] is None and config["clip"][0] is None
        assert (model_name, reason) == ("evil\ufffdname", "read\ufffderror")
