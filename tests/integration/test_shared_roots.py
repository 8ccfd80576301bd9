"""A shared folder mounted at a different path on each host: a root with a `name` is stored
relative to it, so a second host reads the same rows at its own path (list, best, the trash
records a prune wrote, a restore), on SQLite and on a real PostgreSQL; and a root that gets a
name in a catalog that stored it by its absolute path keeps its history."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.catalog.store_claims import Claim
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.core.retention import Policy
from ckpt_daemon.fs import discovery
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import indexer, pruner
from tests.support.catalogs import sql
from tests.support.workspace import ZIP_FILES, ZIP_RUN

pytestmark = pytest.mark.slow


def host(
    tmp_path: Path, url: str, label: str, *, name: str | None = "shared"
) -> tuple[config_module.Config, Path]:
    """One host's config: its own mount point of the shared folder, one catalog."""
    mount = tmp_path / label / "share"
    mount.mkdir(parents=True, exist_ok=True)
    named = f"\n    name: {name}" if name else ""
    config = tmp_path / label / "config.yaml"
    config.write_text(
        f"state_dir: {tmp_path / label / 'state'}\ndatabase: {url}\n"
        f"roots:\n  - path: {mount}{named}\n"
        '    filename_template: "e{epoch:02d}-vl{val_loss:.3f}.keras"\n'
    )
    return config_module.load(str(config)), mount


def mirror(share: Path, mount: Path) -> None:
    """`mount` shows what is in `share` as another host's mount of it would: the same files
    (hard links: same inode, size and mtime, as an NFS client sees them)."""
    shutil.rmtree(mount)
    shutil.copytree(share, mount, copy_function=os.link)


def open_store(config: config_module.Config) -> Store:
    return Store(config.database, named_roots=config.named_roots())


def test_a_second_host_reads_the_rows_at_its_own_mount_point(
    tmp_path: Path, catalog_url: str, keras_checkpoints: Path
) -> None:
    config_a, mount_a = host(tmp_path, catalog_url, "a")
    config_b, mount_b = host(tmp_path, catalog_url, "b")
    run = mount_a / "job"
    run.mkdir()
    for name in ZIP_FILES:
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, run / name)
    store_a = open_store(config_a)
    indexer.scan(config_a, store_a, actor="host-a")
    mirror(mount_a, mount_b)

    stored = sorted(r[0] for r in sql(catalog_url, "SELECT path FROM checkpoints"))
    assert stored == [f"@shared/job/{n}" for n in ZIP_FILES]  # relative to the root's name
    assert {r[0] for r in sql(catalog_url, "SELECT root FROM runs")} == {"@shared"}

    store_b = open_store(config_b)
    listed = store_b.reads.list(ListQuery(run="job"))
    assert sorted(c.path for c in listed) == [str(mount_b / "job" / n) for n in ZIP_FILES]
    assert store_b.reads.best("val_loss", "min", "job").path == str(mount_b / "job" / ZIP_FILES[-1])
    assert set(store_b.index.known_under(str(mount_b))) == {
        str(mount_b / "job" / n) for n in ZIP_FILES
    }
    assert store_b.index.known_under(str(mount_a)) == {}  # host A's path means nothing on host B

    # Host A prunes; host B finds the trash records at its own path and restores from there.
    report = pruner.prune(
        config_a,
        store_a,
        runs=["job"],
        override=Policy(keep_last=1),
        actor="host-a",
    )
    trashed = [d.path for rp in report.runs for d in rp.plan.to_trash()]
    assert len(trashed) == 2
    store_a.close()
    mirror(mount_a, mount_b)
    first = str(mount_b / "job" / ZIP_FILES[0])
    row = store_b.reads.get(first)
    assert row.status.value == "trashed"
    assert all(p.startswith(str(mount_b / ".ckpt-trash")) for p in row.details["trash"]["paths"])
    pruner.restore(config_b, store_b, first, actor="host-b")
    assert Path(first).is_file() and store_b.reads.get(first).status.value == "ok"
    store_b.close()


def test_naming_a_root_later_keeps_its_rows_and_their_history(
    tmp_path: Path, catalog_url: str, keras_checkpoints: Path
) -> None:
    config_plain, mount = host(tmp_path, catalog_url, "a", name=None)
    (mount / "job").mkdir()
    for name in ZIP_FILES:
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, mount / "job" / name)
    store = open_store(config_plain)
    indexer.scan(config_plain, store, actor="t")
    pruner.prune(config_plain, store, runs=["job"], override=Policy(keep_last=2), actor="t")
    store.close()
    events_before = sql(catalog_url, "SELECT count(*) FROM events")[0][0]

    config_named, _ = host(tmp_path, catalog_url, "a", name="shared")
    # Any command opening the catalog with the name adopts the old rows, once.
    store = open_store(config_named)
    assert store.adopted["shared"] > 0
    store.close()
    store = open_store(config_named)
    assert store.adopted == {}
    store.close()
    paths = {r[0] for r in sql(catalog_url, "SELECT path FROM checkpoints")}
    assert paths == {f"@shared/job/{n}" for n in ZIP_FILES}
    assert {r[0] for r in sql(catalog_url, "SELECT path FROM events")} <= paths | {"@shared/job"}

    store = open_store(config_named)
    report = indexer.scan(config_named, store, actor="t")
    assert report.as_dict()["indexed"] == []  # nothing seen as new: the same rows
    trashed = store.reads.get(str(mount / "job" / ZIP_FILES[0]))
    assert trashed.status.value == "trashed"
    pruner.restore(config_named, store, trashed.path, actor="t")
    assert sql(catalog_url, "SELECT count(*) FROM events")[0][0] > events_before
    store.close()


def test_a_new_file_is_read_by_the_daemon_that_claimed_it_and_taken_over_once_expired(
    tmp_path: Path, postgres: Any, keras_checkpoints: Path
) -> None:
    url = postgres.fresh_url()
    try:
        config_a, mount_a = host(tmp_path, url, "a")
        (mount_a / "job").mkdir()
        new = mount_a / "job" / ZIP_FILES[0]
        shutil.copy2(keras_checkpoints / ZIP_RUN / ZIP_FILES[0], new)
        store_a = open_store(config_a)
        stat = discovery.stat_members([new])
        # Another node is reading it: A leaves it to that node, records nothing.
        assert store_a.claims.claim_read(str(new), stat, "node-b", 1.5) == (Claim.OURS, None)
        assert store_a.claims.claim_read(str(new), stat, "node-c", 60) == (
            Claim.ELSEWHERE,
            "node-b",
        )
        report = indexer.scan(config_a, store_a, actor="a")
        assert report.elsewhere == [(str(new), "node-b")] and report.indexed == []
        assert sql(url, "SELECT count(*) FROM checkpoints")[0][0] == 0
        time.sleep(2.0)  # node-b died: its claim expires (by the database's clock)
        report = indexer.scan(config_a, store_a, actor="a")
        assert report.indexed == [str(new)] and report.elsewhere == []
        assert sql(url, "SELECT count(*) FROM claims")[0][0] == 0  # dropped when recorded
        # Whoever comes next finds the bytes recorded: nothing to read, no second event.
        assert store_a.claims.claim_read(str(new), stat, "node-b", 60) == (Claim.RECORDED, None)
        events = sql(url, "SELECT action, node FROM events")
        assert events == [("indexed", config_a.node_name)]
        store_a.close()
    finally:
        postgres.drop(url)
