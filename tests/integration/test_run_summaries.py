"""Every run's summary (`Store.runs`, the web view's overview) kept between calls and read
again only for the runs whose revision moved: the database's triggers (migration 0009) move it
on every write to a run's checkpoints or metrics, on a real SQLite file and a real PostgreSQL
database. A long-lived Store must always answer what a fresh one reads from scratch."""

from __future__ import annotations

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.catalog.store_runs import Derivation
from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord, MetricValue
from tests.support.catalogs import sql

AT = "2026-01-01T00:00:00.000Z"


def record(store: Store, run: str, name: str, val_loss: float, mtime: int) -> int:
    return store.index.record(
        IndexRecord(
            path=f"/r/{run}/{name}",
            root="/r",
            run=run,
            status=CheckpointStatus.OK,
            reason=None,
            stat=FileStat(100 + mtime, mtime, mtime),
            hash=f"h-{run}-{name}",
            metrics=(MetricValue("val_loss", val_loss, "filename"),),
        ),
        actor_name="test",
        at=AT,
    )


def from_scratch(url: str) -> list[object]:
    fresh = Store(url)
    try:
        return list(fresh.reads.runs())
    finally:
        fresh.close()


def revisions(url: str) -> dict[str, int]:
    return {name: int(rev) for name, rev in sql(url, "SELECT name, revision FROM runs")}


def test_a_kept_summary_follows_every_kind_of_write(catalog_url: str) -> None:
    url = catalog_url
    store = Store(url)  # lives across the writes, as the web view's catalog does
    a1 = record(store, "a", "e1.h5", 0.9, 1)
    record(store, "a", "e2.h5", 0.7, 2)
    record(store, "b", "e1.h5", 0.5, 3)
    first = store.reads.runs()
    assert first == from_scratch(url)
    assert {r.name: r.best_values for r in first} == {
        "a": {"val_loss": 0.7},
        "b": {"val_loss": 0.5},
    }

    before = revisions(url)
    best = record(store, "a", "e3.h5", 0.2, 4)  # an insert and its metric: run a alone moves
    moved = revisions(url)
    assert moved["a"] > before["a"] and moved["b"] == before["b"]
    found = {r.name: r for r in store.reads.runs()}
    assert found["a"].checkpoints == 3 and found["a"].best["val_loss"] == "/r/a/e3.h5"
    assert list(found.values()) == from_scratch(url)

    store.index.mark([best], CheckpointStatus.MISSING, "gone", actor_name="test")  # a status update
    found = {r.name: r for r in store.reads.runs()}
    assert found["a"].flags == {"missing": 1} and found["a"].best_values == {"val_loss": 0.7}
    assert list(found.values()) == from_scratch(url)

    # Metrics written by derivation (no audit event): replaced rows of run a's first checkpoint
    ((hash_, mtime),) = sql(url, f"SELECT hash, mtime_ns FROM checkpoints WHERE id = {a1}")
    derived = Derivation(a1, hash_, mtime, 1, None, (MetricValue("val_loss", 0.1, "csv"),), {})
    assert store.runs.set_derived_many([derived], at=AT) == 1
    found = {r.name: r for r in store.reads.runs()}
    assert (
        found["a"].best == {"val_loss": "/r/a/e1.h5"} and found["a"].best_values["val_loss"] == 0.1
    )
    assert list(found.values()) == from_scratch(url)

    # A row deleted outright (as a purge of its record does): the count and the flags follow
    sql(url, f"DELETE FROM checkpoints WHERE id = {best}")
    found = {r.name: r for r in store.reads.runs()}
    assert found["a"].flags == {} and found["a"].checkpoints == 2
    assert list(found.values()) == from_scratch(url)
    store.close()
