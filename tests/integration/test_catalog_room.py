"""The disk guard's own room beside an SQLite catalog (usecases.catalog_room), on real files: made
only with room to spare on a guarded filesystem, given back when the disk is nearly full or a
catalog write failed for lack of space; and that failure recognised on a real SQLite catalog
(SQLITE_FULL, here from `PRAGMA max_page_count`: the same error a full disk gives)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from ckpt_daemon.catalog import db
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import catalog_room


def _config(tmp_path: Path, extra: str = "") -> config_module.Config:
    (tmp_path / "runs").mkdir(exist_ok=True)
    text_ = f"state_dir: {tmp_path / 'state'}\nroots: [{tmp_path / 'runs'}]\nmin_free: 2MB\n"
    return config_module.parse(text_ + extra, base=tmp_path, source="test")


def test_the_room_is_made_with_room_to_spare_and_given_back_when_starved(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "state").mkdir()
    room = catalog_room.room_path(config)
    assert room == tmp_path / "state" / catalog_room.ROOM_NAME
    dev = os.stat(tmp_path).st_dev
    assert catalog_room.tend(config, {}) == 0 and not room.exists()  # no guard on this disk
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert catalog_room.tend(config, {dev: free}) == 0 and not room.exists()  # no room to spare
    assert catalog_room.tend(config, {dev: 1_000_000}) == -catalog_room.ROOM_BYTES
    assert os.stat(room).st_blocks * 512 >= catalog_room.ROOM_BYTES  # real blocks, not a hole
    assert catalog_room.tend(config, {dev: 1_000_000}) == 0  # kept while there is room
    assert catalog_room.tend(config, {dev: 1_000_000}, starved=True) >= catalog_room.ROOM_BYTES
    assert not room.exists()
    assert not [p for p in room.parent.iterdir() if p.name != "catalog.db"]  # no temp left


def test_no_room_for_a_catalog_that_is_not_an_sqlite_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "database: postgresql+psycopg://u@localhost/ckpt\n")
    assert catalog_room.room_path(config) is None
    assert catalog_room.tend(config, {os.stat(tmp_path).st_dev: 0}) == 0


def test_a_catalog_write_that_finds_no_space_is_told_apart(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'full.db'}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x TEXT)"))
        with pytest.raises(OperationalError) as full, engine.begin() as conn:
            conn.execute(text("PRAGMA max_page_count = 3"))
            for _ in range(100):
                conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "x" * 4000})
        assert db.out_of_space(full.value), full.value
        with pytest.raises(OperationalError) as other, engine.begin() as conn:
            conn.execute(text("SELECT * FROM no_such_table"))
        assert not db.out_of_space(other.value)
        assert not db.out_of_space(ValueError("nothing to do with space"))
    finally:
        engine.dispose()
