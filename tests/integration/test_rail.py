"""The rail (`usecases.rail`) on real files and a real catalog: `restore --version` swaps a kept
generation in only under its run's lease, like every other destructive act. Real Keras 3
`.keras` generations (the fixtures) rewritten in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckpt_daemon.api import open_catalog
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import LeaseHeld
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import indexer
from tests.support import Workspace

GENERATIONS = ["e01-vl1.683.keras", "e02-vl1.663.keras"]


def save(ws: Workspace, fixtures: Path, n: int) -> Path:
    """Generation `n` of `job/best.keras`, rewritten in place (same inode) as Keras does."""
    best = ws.root / "job" / "best.keras"
    best.parent.mkdir(exist_ok=True)
    data = (fixtures / "k3" / "run_zip" / GENERATIONS[n - 1]).read_bytes()
    with open(best, "r+b" if best.exists() else "wb") as out:
        out.truncate(0)
        out.write(data + bytes(n))  # distinct bytes per generation (zip readers skip the tail)
    (best.parent / "best.keras.json").write_text(json.dumps({"epoch": n}))
    return best


def test_restore_version_waits_for_its_runs_lease(tmp_path: Path, keras_checkpoints: Path) -> None:
    ws = Workspace(tmp_path)
    config = config_module.load(str(ws.config))
    for n in (1, 2):
        best = save(ws, keras_checkpoints, n)
        store = Store(config.database)
        indexer.scan(config, store, actor="test")
        store.close()
    now = best.read_bytes()
    store = Store(config.database)
    [run_id] = [key for key, _root, name in store.reads.run_keys() if name == "job"]
    kept = store.versions.versions_of(str(best))[0]
    assert kept.generation == 1  # each generation of a fixed name is kept
    with store.leases.lease(run_id, "another prune", config.lease_seconds):
        with open_catalog(str(ws.config)) as cat, pytest.raises(LeaseHeld) as held:
            cat.restore_version(str(best), version=1)
        assert held.value.exit_code == 4 and "another prune" in str(held.value)
        assert best.read_bytes() == now  # nothing swapped while another process holds the run
    with open_catalog(str(ws.config)) as cat:  # the lease given up: the restore goes through
        row = cat.restore_version(str(best), version=1)
        assert best.read_bytes() == Path(kept.path).read_bytes() and row.hash == kept.hash
        states = [e["state"] for e in cat.log("job") if e["action"] == "restore-version"]
        assert states == ["done"]  # the refused attempt audited nothing: it never acted
    store.close()
