"""The disk guard's use case and thread on real Keras 3 files and a real catalog, where it cannot
free enough (`min_free: 99%` of the real filesystem): it takes everything it may, in the
documented order (trash purged, then demotions), touches nothing protected, says what holds the
space, warns once per episode, and ends the episode once back above (`min_free` lowered)."""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core import retention
from ckpt_daemon.core.disk_guard import MinFree
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.service import exporter
from ckpt_daemon.service.disk_guard import DiskGuard
from ckpt_daemon.service.hooks import HookRunner
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.settings.operations import Hook
from ckpt_daemon.usecases import disk_guard, indexer, pruner

pytestmark = pytest.mark.slow
NAMES = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]


@pytest.fixture
def guarded(tmp_path: Path, keras_checkpoints: Path):
    root = tmp_path / "runs"
    for run in ("a", "b"):
        shutil.copytree(keras_checkpoints / "k3" / "run_zip", root / run)
    (tmp_path / "config.yaml").write_text(
        f"state_dir: {tmp_path / 'state'}\nroots:\n  - path: {root}\n    min_free: 99%\n"
    )
    config = config_module.load(str(tmp_path / "config.yaml"))
    store = Store(config.database, may_migrate=True)
    indexer.scan(config, store, actor="test")
    pruner.set_pinned(store.reads, store.acts, str(root / "a" / NAMES[0]), True, "test")
    # b's two oldest go to the trash (retention), where the guard finds them first.
    pruner.prune(
        config,
        store,
        runs=["b"],
        override=retention.Policy(keep_last=1),
        actor="test",
    )
    yield config, store, root
    store.close()


def test_it_takes_what_it_may_in_order_and_says_what_holds_the_space(guarded) -> None:
    config, store, root = guarded
    (fs,) = disk_guard.guarded(config)
    assert fs.roots == (str(root),) and fs.min_free == MinFree(percent=99.0)
    relief = disk_guard.relieve(config, store, fs, actor="daemon:disk-guard")
    assert [(s.action, Path(s.path).parent.name, Path(s.path).name) for s in relief.done] == [
        ("purge", "b", NAMES[0]),
        ("purge", "b", NAMES[1]),
        ("demote", "a", NAMES[1]),  # a's e01 is pinned, e03 its newest and best val_loss
    ]
    assert not relief.failures and not relief.plan.enough
    text = relief.plan.explain()
    assert "cannot free enough" in text and "protected checkpoints hold" in text
    assert "other files on the filesystem, not in the catalog" in text
    assert f"{root / 'a' / NAMES[0]} (" in text and "pinned" in text
    # Protected files untouched; the demoted one left its inference artifact.
    for kept in ("a/" + NAMES[0], "a/" + NAMES[2], "b/" + NAMES[2]):
        assert (root / kept).is_file(), kept
    assert not (root / "a" / NAMES[1]).exists()
    assert (root / "a" / "e02-vl1.663.inference.keras").is_file()
    statuses = {c.path: c.status.value for c in store.reads.list(ListQuery(status="purged"))}
    assert set(statuses) == {str(root / "b" / NAMES[0]), str(root / "b" / NAMES[1]),
                             str(root / "a" / NAMES[1])}  # fmt: skip
    events = [e for e in store.acts.audit_log() if e.actor == "daemon:disk-guard"]
    gone = [e for e in events if e.action in ("trash", "purge")]
    assert len(gone) == 4 and all((e.reason or "").startswith("disk pressure (free ") for e in gone)
    # The min_free gauge is the real threshold, 99% of this filesystem.
    assert exporter.snapshot(config, store, {}).min_free[str(root)] == relief.plan.threshold


def test_the_thread_warns_once_per_episode_and_status_says_cannot_free(
    guarded, caplog: pytest.LogCaptureFixture
) -> None:
    config, store, _root = guarded
    current = [config]
    hooks = HookRunner((Hook(("disk_pressure",), ("true",)),), threading.Event())  # not started
    guard = DiskGuard(lambda: current[0], store, hooks, threading.Event())
    guard.quiet_seconds = 0.0
    with caplog.at_level(logging.INFO):
        guard.check()
        guard.check(poked=True)  # still below: the same episode, no second warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # A threshold nothing it may free can meet is said once before the guard's first act.
    assert [r.getMessage() for r in warnings] == ["min_free_unreachable", "disk_pressure"]
    (hook,) = [hooks.queue.get_nowait() for _ in range(hooks.queue.qsize())]  # once per episode
    assert hook["event"] == "disk_pressure" and hook["path"] == str(config.roots[0].path)
    assert hook["min_free_bytes"] == guard.states[0]["min_free_bytes"]
    assert "cannot free enough" in hook["reason"]
    (state,) = guard.states
    assert state["state"] == "cannot free" and "cannot free enough" in state["why"]
    (shown,) = disk_guard.status(config, guard.states)
    assert shown["state"] == "cannot free" and shown["why"] == state["why"]
    (alone,) = disk_guard.status(config, [], running=False)  # nobody frees it
    assert alone["state"] == "pressure" and "no daemon" in alone["why"]

    lowered = replace(config, roots=(replace(config.roots[0], min_free=MinFree(bytes=1)),))
    current[0] = lowered
    with caplog.at_level(logging.INFO):
        guard.check()
    assert guard.states[0]["state"] == "ok" and not guard.episodes
    assert "disk_pressure_end" in [r.getMessage() for r in caplog.records]
    assert disk_guard.status(lowered, guard.states)[0]["state"] == "ok"
