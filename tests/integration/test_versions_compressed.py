"""A kept version of a file that `ckpt compress` rewrote in place: the file holds the same
generation (new bytes, the same tensors), so the copy of that generation stays `standby`,
whichever of the worker's capture and the compress records first: the capture takes no lease
(usecases.rail.copy_generation), so a compress may swap the file between the capture's copy
and its row. Real files, a real catalog, the real compress; the race's order played step by
step, as the e2e test_metrics_hooks scenario once ran it on a loaded machine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core import versions as naming
from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.core.model import FileStat
from ckpt_daemon.fs import fsops
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import indexer, rail, versions
from ckpt_daemon.usecases.artifacts import compress_checkpoint
from tests.support import Workspace

pytestmark = pytest.mark.slow


def padded_full_h5(ws: Workspace, fixtures: Path) -> Path:
    """`legacy/full.h5`, a fixed name, padded so that it shrinks when compressed."""
    full = ws.root / "legacy" / "full.h5"
    full.parent.mkdir()
    shutil.copyfile(fixtures / "k3" / "legacy" / "full.h5", full)
    with h5py.File(full, "a") as f:
        f.create_dataset("padding", data=np.zeros(65536, np.float32))
    return full


def scan(ws: Workspace) -> tuple[config_module.Config, Store]:
    config = config_module.load(str(ws.config))
    store = Store(config.database)
    indexer.scan(config, store, actor="test")
    return config, store


def test_a_copy_recorded_after_a_compress_swapped_its_file_is_standby(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    ws.config.write_text(ws.config.read_text() + 'versions:\n  capture: "off"\n')  # by hand below
    full = padded_full_h5(ws, keras_checkpoints)
    config, store = scan(ws)
    row = store.reads.get(str(full))
    root = config.root_for(full)
    assert root is not None and row.generation == 1
    # The worker's capture (usecases.versions.capture) reads the row and copies the bytes...
    source = store.versions.version_source(row.id)
    assert source is not None and source.hash == row.hash
    target = root.path.joinpath(*naming.version_parts(fsops.relative_parts(root.path, full), 1))

    def verify(temp: Path) -> None:
        assert hash_files([temp], root.path) == source.hash

    how = rail.copy_generation(root, full, target, verify)
    # ...then `ckpt compress` swaps the file and records its new bytes...
    compressed, result = compress_checkpoint(config, store, str(full), actor="test")
    assert result.skipped is None and compressed.hash != source.hash
    # ...then the capture records its copy: of the generation the file still holds.
    info = os.stat(target)
    stat = FileStat(info.st_size, info.st_mtime_ns, info.st_ino)
    store.versions.add_version(source, str(target), stat, how=how, actor_name="test")
    [kept] = store.versions.versions_of(str(full))
    assert (kept.generation, kept.status, kept.hash) == (1, "standby", source.hash)
    # the file's row: the same content
    assert store.reads.get(str(kept.id)).n_params == row.n_params
    store.close()


def test_a_version_stays_standby_when_its_compressed_file_is_read_again(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    full = padded_full_h5(ws, keras_checkpoints)
    config, store = scan(ws)  # generation 1 indexed and kept (a fixed name): standby
    [kept] = store.versions.versions_of(str(full))
    assert (kept.generation, kept.status) == (1, "standby")
    compress_checkpoint(config, store, str(full), actor="test")
    assert [v.status for v in store.versions.versions_of(str(full))] == ["standby"]
    later = os.stat(full).st_mtime_ns + 10**9
    os.utime(full, ns=(later, later))  # the next scan reads it again: the same bytes
    indexer.scan(config, store, actor="test")
    row = store.reads.get(str(full))
    assert store.index.identity(row.id)[0].mtime_ns == later and row.generation == 1
    assert [(v.path, v.status) for v in store.versions.versions_of(str(full))] == [
        (kept.path, "standby")
    ]
    assert os.listdir(Path(kept.path).parent) == [Path(kept.path).name]  # no second copy
    with pytest.raises(UsageError, match="already holds generation 1: nothing to do"):
        versions.restore_version(  # not refused as a generation that could not be kept first
            config,
            store,
            store.versions,
            str(full),
            generation=1,
            actor="test",
            index=lambda p: None,
        )
    store.close()


def test_a_scan_between_compress_swap_and_its_record_sees_no_new_generation(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """The worker reads the file after compress swapped it and before compress recorded it
    (`record_rewrite`): new bytes, the same content, no trainer's save. It must not count a new
    generation (the file would then read as one its trainer rewrites, and a kept copy of our own
    bytes would be taken); compress records it. The order played step by step: the rail's act
    (lease, planned event), the swap, a second daemon's scan, then the record."""
    from ckpt_daemon.transforms.compress import compress

    ws = Workspace(tmp_path)
    full = padded_full_h5(ws, keras_checkpoints)
    config, store = scan(ws)
    row = store.reads.get(str(full))
    assert row.generation == 1
    with rail.acting_on(config, store, row, "compress", "test") as (root, members):
        result = compress(root, full, indexed=store.index.identity(row.id)[0])
        assert result.skipped is None
        worker = Store(config.database)  # the daemon's worker, reading the folder now
        indexer.scan(config, worker, actor="worker")
        assert worker.reads.get(str(full)).generation == 1
        assert worker.reads.get(str(full)).hash == row.hash  # left to compress to record
        worker.close()
        stat = fsops.current_stat(root, members)
        store.acts.record_rewrite(row.id, stat=stat, digest=result.hash, codec=result.codec)
    after = store.reads.get(str(full))
    assert (after.generation, after.hash) == (1, result.hash)
    assert [(v.generation, v.status) for v in store.versions.versions_of(str(full))] == [
        (1, "standby")
    ]
    indexer.scan(config, store, actor="test")  # the next scan: nothing new
    assert store.reads.get(str(full)).generation == 1
    store.close()
