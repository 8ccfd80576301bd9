"""`latest` on a real catalog: both readers (`store_reads`, `sqlite_reads`) give the same answer,
and it is the one an independent oracle gives (most iterations, then epoch, step, mtime, id;
`core.resume` for --resumable; a file its trainer rewrites, named without a number, passed over
for a file of the same epoch and step that is not: issue 41); ties, runs below a run, and the
stat guard of `best`/`latest` that skips files changed behind the catalog's back."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog import pick
from ckpt_daemon.catalog.copy import copy_catalog
from ckpt_daemon.catalog.rows import LISTING_COLUMNS
from ckpt_daemon.catalog.sqlite_reads import SqliteReads
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import NotFound, UsageError
from ckpt_daemon.core.model import CheckpointStatus, FileStat, Format, IndexRecord
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.core.resume import resumability
from ckpt_daemon.settings import config as config_module
from tests.support import Workspace
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.slow

# run -> [(fixture path, name in the run)]
LAYOUT = {
    "a": [
        ("k3/run_zip/e01-vl1.683.keras", "e01-vl1.683.keras"),
        ("k3/run_zip/e02-vl1.663.keras", "e02-vl1.663.keras"),
        ("k3/run_zip/e03-vl1.643.keras", "e03-vl1.643.keras"),
        ("k3/legacy/full.h5", "full.h5"),  # Keras 3 legacy .h5: never resumable
        ("k3/run_weights/w.02.weights.h5", "w.02.weights.h5"),
    ],
    "a/sub": [
        ("tfk/run_h5/weights.01-1.69.hdf5", "weights.01-1.69.hdf5"),
        ("tfk/run_h5/weights.02-1.68.hdf5", "weights.02-1.68.hdf5"),
    ],
    "tf": [
        ("k3/tfckpt/checkpoint", "checkpoint"),
        ("k3/tfckpt/ckpt-1.index", "ckpt-1.index"),
        ("k3/tfckpt/ckpt-1.data-00000-of-00001", "ckpt-1.data-00000-of-00001"),
        ("k3/tfckpt/ckpt-2.index", "ckpt-2.index"),
        ("k3/tfckpt/ckpt-2.data-00000-of-00001", "ckpt-2.data-00000-of-00001"),
    ],
    "b": [("tfk/weights_only.h5", "weights_only.h5")],
}


@pytest.fixture(scope="module")
def scanned_ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("latest"))
    for run, files in LAYOUT.items():
        (ws.root / run).mkdir(parents=True, exist_ok=True)
        for source, name in files:
            shutil.copy2(keras_checkpoints / source, ws.root / run / name)
    for name in ("weights.01-1.69.hdf5", "weights.02-1.68.hdf5"):
        os.utime(ws.root / "a" / "sub" / name, ns=(10**18, 10**18))
    ws.run("scan")
    return ws


def _url(ws: Workspace) -> str:
    return str(config_module.load(str(ws.config)).database)


@pytest.fixture
def catalog_copy(scanned_ws: Workspace, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the scanned catalog (its rows may be edited into tie states)."""
    source = sqlite3.connect(_url(scanned_ws).removeprefix("sqlite:///"))
    target = tmp_path / "catalog.db"
    with sqlite3.connect(target) as out:
        source.backup(out)
    source.close()
    yield target


def _readers(db_file: Path) -> tuple[Store, SqliteReads]:
    reads = SqliteReads.open(f"sqlite:///{db_file}")
    assert reads is not None
    return Store(f"sqlite:///{db_file}"), reads


def oracle(db_file: Path, run: str | None, resumable: bool) -> str | None:
    """The newest ok checkpoint in scope, decided in Python from the raw rows."""
    with sqlite3.connect(db_file) as conn:
        rows = conn.execute(
            "SELECT c.id, c.path, r.name, c.format, c.kind, c.optimizer_bytes, c.keras_version,"
            " c.iterations, c.epoch, c.step, c.mtime_ns, c.generation FROM checkpoints c"
            " JOIN runs r ON r.id = c.run_id WHERE c.status = 'ok'"
        ).fetchall()
    scoped = [r for r in rows if run is None or r[2] == run or r[2].startswith(run + "/")]
    if resumable:
        scoped = [
            r
            for r in scoped
            if resumability(Format(r[3]) if r[3] else None, r[4], r[5], r[6]).resumable
        ]

    def key(r: Any) -> tuple[Any, ...]:
        out: list[Any] = []
        for value in (r[7], r[8], r[9]):
            out += [value is None, -(value or 0)]
        return (*out, -r[10], -r[0])

    if not scoped:
        return None
    winner = min(scoped, key=key)
    if not _rewritten(winner) or (winner[8], winner[9]) == (None, None):
        return str(winner[1])
    twins = [r for r in scoped if (r[8], r[9]) == (winner[8], winner[9]) and not _rewritten(r)]
    return str(min(twins, key=key)[1] if twins else winner[1])


def _rewritten(r: Any) -> bool:
    """A name without a digit before its suffix (`full.h5`, `last.ckpt`), or seen rewritten."""
    stem = Path(r[1]).name.rsplit(".", 1)[0].removesuffix(".weights")  # w.02.weights.h5: w.02
    return r[11] > 1 or not any(ch.isdigit() for ch in stem)


TIES = {
    "as scanned": [],
    # no iterations known anywhere: epoch decides, then step, then mtime, then id
    "no iterations": ["UPDATE checkpoints SET iterations = NULL"],
    "same iterations": ["UPDATE checkpoints SET iterations = 6 WHERE iterations IS NOT NULL"],
    "same iterations and epoch": [
        "UPDATE checkpoints SET iterations = 6, epoch = 2 WHERE iterations IS NOT NULL"
    ],
    # a/sub's two files have one mtime (set before the scan): the id decides there
    "all equal but id": ["UPDATE checkpoints SET iterations = 6, epoch = 2, step = NULL"],
    "iterations beat epoch": [
        "UPDATE checkpoints SET epoch = 99 WHERE path LIKE '%e01-vl1.683.keras'",
        "UPDATE checkpoints SET iterations = 100 WHERE path LIKE '%e02-vl1.663.keras'",
    ],
    "unknown iterations sort last": [
        "UPDATE checkpoints SET iterations = NULL, epoch = 50 WHERE path LIKE '%e03%'"
    ],
}
SCOPES = ["a", "a/sub", "tf", "b"]


@pytest.mark.parametrize("tie", list(TIES))
def test_both_readers_agree_with_the_oracle(catalog_copy: Path, tie: str) -> None:
    """The file stats in the copy are the real files' (only ordering facts are edited), so the
    stat guard passes and the answer is the ordering's."""
    with sqlite3.connect(catalog_copy) as conn:
        for sql in TIES[tie]:
            conn.execute(sql)
    store, reads = _readers(catalog_copy)
    try:
        answered = 0
        for run in SCOPES:
            for resumable in (False, True):
                expected = oracle(catalog_copy, run, resumable)
                if expected is None:
                    for source in (store.reads, reads):
                        with pytest.raises(NotFound, match="no ok checkpoint in run"):
                            source.latest(run, resumable)
                    continue
                found = store.reads.latest(run, resumable)
                assert dataclasses.asdict(reads.latest(run, resumable)) == dataclasses.asdict(found)
                assert (run, resumable, found.path) == (run, resumable, expected)
                assert found.details["resumable"] or not resumable
                answered += 1
        assert answered >= 6
    finally:
        reads.close()
        store.close()


def test_answers_as_scanned(catalog_copy: Path) -> None:
    """What a user sees: the covering run's newest, the TF prefix, the reasons."""
    store, reads = _readers(catalog_copy)
    try:
        for source in (store.reads, reads):
            assert source.latest("a").path.endswith("e03-vl1.643.keras")  # 9 iterations
            assert source.latest("a/sub", True).path.endswith("weights.02-1.68.hdf5")
            tf = source.latest("tf", True)
            assert tf.path.endswith("/tf/ckpt-2") and tf.details["resumable"]
            assert "restore(prefix)" in tf.details["resume_reason"]
            weights = source.latest("b")
            assert not weights.details["resumable"]
            with pytest.raises(NotFound, match=r"weights_only.h5, cannot .weights only"):
                source.latest("b", True)
            with pytest.raises(UsageError, match="several runs have ok checkpoints"):
                source.latest(None)
            with pytest.raises(NotFound, match=r"no ok checkpoint in run 'zzz'$"):
                source.latest("zzz")
    finally:
        reads.close()
        store.close()


@pytest.fixture
def private_ws(tmp_path: Path, keras_checkpoints: Path) -> Workspace:
    """One run of the three epochs and a TF CheckpointManager folder, scanned: files to change."""
    ws = Workspace(tmp_path)
    for run in ("a", "tf"):
        (ws.root / run).mkdir()
        for source, name in LAYOUT[run][:3] if run == "a" else LAYOUT[run]:
            shutil.copy2(keras_checkpoints / source, ws.root / run / name)
    ws.run("scan")
    return ws


def test_the_stat_guard_skips_a_file_changed_behind_the_catalogs_back(
    private_ws: Workspace,
) -> None:
    newest = private_ws.root / "a" / "e03-vl1.643.keras"  # val_loss 1.643: also the best
    info = newest.stat()
    os.utime(newest, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # rewritten, no scan
    shard = private_ws.root / "tf" / "ckpt-2.data-00000-of-00001"
    before = shard.stat()
    with shard.open("ab") as f:  # a TF checkpoint's data shard grew: the prefix is changed
        f.write(b"\0")
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # the size alone tells
    store, reads = _readers(Path(_url(private_ws).removeprefix("sqlite:///")))
    try:
        for source in (store.reads, reads):
            found = source.latest("a", True)
            assert found.path.endswith("e02-vl1.663.keras")
            assert found.details["skipped"] == [f"{newest}: mtime_ns changed since indexed"]
            by_metric = source.best("val_loss", "min", "a")
            assert by_metric.path.endswith("e02-vl1.663.keras")
            assert by_metric.details["skipped"] == found.details["skipped"]
            tf = source.latest("tf", True)
            assert tf.path.endswith("/tf/ckpt-1")
            prefix = private_ws.root / "tf" / "ckpt-2"
            assert tf.details["skipped"] == [f"{prefix}: size changed since indexed"]
        newest.unlink()
        (private_ws.root / "a" / "e02-vl1.663.keras").unlink()
        (private_ws.root / "a" / "e01-vl1.683.keras").write_bytes(b"x")
        for source in (store.reads, reads):
            with pytest.raises(NotFound, match=r"3 candidate.s. changed.*file missing"):
                source.latest("a")
            with pytest.raises(NotFound, match="has metric 'val_loss' with its bytes unchanged"):
                source.best("val_loss", "min", "a")
    finally:
        reads.close()
        store.close()


def test_the_guard_gives_up_after_max_changed(tmp_path: Path) -> None:
    """Real files whose rows say another mtime: at most MAX_CHANGED are stat'ed, then NotFound."""
    root = tmp_path / "root"
    root.mkdir()
    rows = []
    for i in range(pick.MAX_CHANGED + 20):
        path = root / f"e{i:03d}.keras"
        path.write_bytes(b"k")
        info = path.stat()
        row: list[Any] = [None] * (len(LISTING_COLUMNS) + 2)
        row[0], row[1], row[3], row[4], row[5] = i, str(path), str(root), "keras-v3-zip", "full"
        row[8], row[9], row[10] = info.st_size, info.st_mtime_ns - 1, info.st_ino
        rows.append(row)
    asked: list[int] = []

    def pages(offset: int, limit: int) -> list[Any]:
        asked.append(offset)
        return rows[offset : offset + limit]

    outcome = pick.first_unchanged(pages, lambda _id: {})
    assert outcome.row is None and len(outcome.changed) == pick.MAX_CHANGED
    assert asked == [0]  # one page was enough to give up
    with pytest.raises(NotFound, match=f"gave up after {pick.MAX_CHANGED}"):
        raise pick.not_found(outcome, "ok checkpoint in run 'r'")
    rows[pick.MAX_CHANGED - 1][9] += 1  # the 50th is unchanged after all: it wins
    assert pick.first_unchanged(pages, lambda _id: {}).row is rows[pick.MAX_CHANGED - 1]


def _answer(source: Store, run: str, resumable: bool) -> Any:
    try:
        return dataclasses.asdict(source.reads.latest(run, resumable))
    except NotFound as exc:
        return str(exc)


def test_a_copy_on_postgresql_answers_as_the_sqlite_catalog(
    scanned_ws: Workspace, postgres: PostgresServer, tmp_path: Path
) -> None:
    """`db copy` SQLite -> PostgreSQL -> SQLite: the checksums of every table agree across the
    backends (checked inside the copy), PostgreSQL's readers give the SQLite catalog's answers,
    the CLI's SQLite fast path declines a PostgreSQL URL, and new rows get new ids."""
    source = _url(scanned_ws)
    url = postgres.fresh_url(at_head=False)
    try:
        copied = {t.table: t.rows for t in copy_catalog(source, url)}
        assert copied["checkpoints"] >= 9 and copied["events"] >= copied["checkpoints"]
        assert SqliteReads.open(url) is None  # the CLI falls back to store_reads
        sqlite_store, pg_store = Store(source), Store(url)
        try:
            for run in SCOPES:
                for resumable in (False, True):
                    assert _answer(pg_store, run, resumable) == _answer(
                        sqlite_store, run, resumable
                    )
            assert [dataclasses.asdict(c) for c in pg_store.reads.list(ListQuery())] == [
                dataclasses.asdict(c) for c in sqlite_store.reads.list(ListQuery())
            ]
            new = pg_store.index.record(
                IndexRecord(
                    path="/elsewhere/run/new.h5",
                    root="/elsewhere",
                    run="run",
                    status=CheckpointStatus.OK,
                    reason=None,
                    stat=FileStat(1, 1, 1),
                    hash="n",
                ),
                actor_name="test",
                at="2026-12-01T00:00:00Z",
            )
            assert new > max(c.id for c in sqlite_store.reads.list(ListQuery()))  # sequence reset
        finally:
            sqlite_store.close()
            pg_store.close()
        with pytest.raises(UsageError, match=r"not empty: artifacts|not empty: .*checkpoints"):
            copy_catalog(source, url)
        back = {t.table: t.rows for t in copy_catalog(url, f"sqlite:///{tmp_path / 'back.db'}")}
        assert back == {
            **copied,
            "runs": copied["runs"] + 1,
            "checkpoints": copied["checkpoints"] + 1,
            "events": copied["events"] + 1,
        }
    finally:
        postgres.drop(url)
