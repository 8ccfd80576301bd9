"""Kept versions on real files and a real catalog: the copy (never a link), its row and standby
status as the file is rewritten or goes, retention of versions in a run without a policy,
`restore_version`, and a crash's orphans adopted or trashed. Real Keras 3 `.keras` generations
(the fixtures), each with the sidecar a trainer may write beside it."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from ckpt_daemon.api import open_catalog
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import Refused, WouldReplace
from ckpt_daemon.core.query import ListQuery
from ckpt_daemon.fs import fsops
from ckpt_daemon.fs.fsclone import clone_new
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import guards, indexer, pruner, rail, recovery
from tests.support import Workspace

pytestmark = pytest.mark.slow
GENERATIONS = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]
VAL_LOSS = [0.9, 0.4, 0.7]  # generation 2 is the best


def save(ws: Workspace, fixtures: Path, n: int) -> Path:
    """Generation `n` (1-based) of `job/best.keras`, rewritten in place as Keras does."""
    best = ws.root / "job" / "best.keras"
    best.parent.mkdir(exist_ok=True)
    with open(fixtures / "k3" / "run_zip" / GENERATIONS[(n - 1) % 3], "rb") as src:
        data = src.read()
    with open(best, "r+b" if best.exists() else "wb") as out:  # the same inode, truncated
        out.truncate(0)
        out.write(data + bytes(n))  # distinct bytes per generation (zip readers skip the tail)
    sidecar = {"epoch": n, "val_loss": VAL_LOSS[(n - 1) % 3]}
    (best.parent / "best.keras.json").write_text(json.dumps(sidecar))
    return best


def scan(ws: Workspace) -> tuple[config_module.Config, Store]:
    config = config_module.load(str(ws.config))
    store = Store(config.database)
    indexer.scan(config, store, actor="test")
    return config, store


def test_each_generation_is_kept_and_standby_while_the_file_holds_it(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    for n in (1, 2, 3):
        best = save(ws, keras_checkpoints, n)
        config, store = scan(ws)
        store.close()
    store = Store(config.database)
    kept = store.versions.versions_of(str(best))
    assert [(v.generation, v.status) for v in kept] == [(1, "ok"), (2, "ok"), (3, "standby")]
    for v in kept:
        assert os.stat(v.path).st_ino != os.stat(best).st_ino  # a copy, never a link
    assert Path(kept[2].path).read_bytes() == best.read_bytes()
    listed = store.reads.list(ListQuery(run="job"))
    assert sorted((c.version_of is not None, c.generation) for c in listed) == [
        (False, 3),
        (True, 1),
        (True, 2),
    ]  # the standby copy is the file itself: listed once
    by_gen = {c.generation: c for c in listed if c.version_of}
    assert (by_gen[2].epoch, by_gen[2].metrics["val_loss"]) == (2, 0.4)
    # A kept copy is no training moment: an answer only when asked (issue 39).
    assert store.reads.best("val_loss", "min", "job").path == str(best)
    assert store.reads.best("val_loss", "min", "job", versions=True).path == kept[1].path

    best.unlink()  # the trainer deleted it: its standby copy is a version now
    indexer.scan(config, store, actor="test")
    assert [v.status for v in store.versions.versions_of(str(best))] == ["ok", "ok", "ok"]
    store.close()


def test_a_run_without_policy_keeps_the_best_and_the_previous_version(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    for n in range(1, 6):  # val_loss 0.9, 0.4, 0.7, 0.9, 0.4: the 5th is the file now
        best = save(ws, keras_checkpoints, n)
        config, store = scan(ws)
        store.close()
    store = Store(config.database)
    report = pruner.plan_runs(config, store.reads, store.remote, store.stage_jobs)
    [run] = report.runs
    assert run.policy.startswith("versions:")
    decisions = {Path(d.path).name: (d.action, d.reasons) for d in run.plan.decisions}
    assert set(decisions) == {f"best.v{g}.keras" for g in (1, 2, 3, 4)}  # not the file itself
    assert (
        decisions["best.v2.keras"][0] == "keep"
        and "best val_loss #1" in decisions["best.v2.keras"][1][0]
    )
    assert decisions["best.v4.keras"] == (  # a copy is never "newest" (issue 39)
        "keep",
        ("previous generation of best.keras (v4)",),
    )
    assert decisions["best.v1.keras"][0] == decisions["best.v3.keras"][0] == "trash"
    pruner.prune(config, store, actor="test")
    assert [v.generation for v in store.versions.versions_of(str(best))] == [2, 4, 5]
    assert (ws.root / ".ckpt-trash").is_dir() and best.exists()
    store.close()


def three_generations(ws: Workspace, fixtures: Path) -> tuple[config_module.Config, Path]:
    """`job/best.keras` saved three times, each generation scanned, `capture: rewritten`."""
    (ws.config).write_text(ws.config.read_text() + "versions:\n  capture: rewritten\n")
    for n in (1, 2, 3):
        best = save(ws, fixtures, n)
        config, store = scan(ws)
        store.close()
    return config, best


def test_restore_puts_an_old_generation_back_and_keeps_the_current_one(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    config, best = three_generations(ws, keras_checkpoints)
    store = Store(config.database)
    # `rewritten`: generation 1 was never kept; 2 is; 3 (the file now) is kept at the restore.
    assert [v.generation for v in store.versions.versions_of(str(best))] == [2, 3]
    v2 = Path(store.versions.versions_of(str(best))[0].path)
    store.close()
    with open_catalog(str(ws.config)) as cat:
        row = cat.restore_version(str(best), epoch=2)
        assert best.read_bytes() == v2.read_bytes() and row.hash == cat.get(str(v2)).hash
        assert row.generation == 4  # a new generation of the file, with generation 2's bytes
        events = [e["action"] for e in cat.log("job")]
        assert "restore-version" in events
    store = Store(config.database)
    kept = {v.generation: v.status for v in store.versions.versions_of(str(best))}
    assert kept == {2: "standby", 3: "ok"}  # 2 is what the file holds again
    store.close()


def test_a_copy_is_never_torn_nor_replaces_anything(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "job").mkdir(parents=True)
    source, target = root / "job" / "best.keras", root / ".ckpt-versions" / "job" / "best.v1.keras"
    source.write_bytes(b"generation one" * 1000)

    def torn(temp: Path) -> None:
        raise RuntimeError("hash differs")

    with pytest.raises(RuntimeError):
        clone_new(root, source, target, torn)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no temp left
    assert clone_new(root, source, target, lambda _temp: None) in ("copy", "reflink")
    with open(source, "r+b") as f:  # the trainer rewrites the same inode
        f.write(b"generation two")
    assert target.read_bytes() == b"generation one" * 1000
    with pytest.raises(WouldReplace):
        clone_new(root, source, target, lambda _temp: None)
    link = root / "job" / "link.keras"
    link.symlink_to(source)
    with pytest.raises(Refused):
        clone_new(root, link, root / ".ckpt-versions" / "job" / "link.v1.keras", lambda _t: None)


def test_orphans_of_a_crash_are_adopted_or_moved_to_the_trash(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = Workspace(tmp_path)
    best = save(ws, keras_checkpoints, 1)
    config, store = scan(ws)
    [kept] = store.versions.versions_of(str(best))
    # A crash between the rename and the row: the file is there, its row is not.
    orphan = Path(kept.path).with_name("best.v7.keras")
    shutil.copy2(kept.path, orphan)
    junk = Path(kept.path).with_name("notes.txt")
    junk.write_text("not ours")
    planted = Path(kept.path).with_name("link.v9.keras")  # hostile: never followed nor moved
    planted.symlink_to(tmp_path / "outside")
    store.close()
    store = Store(config.database)
    done = recovery.adopt_orphans(
        store.reads, store.recovery, store.versions, config.roots[0], actor="test"
    )
    assert sorted(line.split(":")[0].split()[0] for line in done) == ["adopted", "left", "moved"]
    assert planted.is_symlink() and not (tmp_path / "outside").exists()
    assert not junk.exists() and any((ws.root / ".ckpt-trash").rglob("notes.txt"))
    assert str(orphan) in store.versions.version_files(str(ws.root))
    store.close()


def test_a_generation_after_the_file_was_caught_empty_is_still_kept(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """A trainer's save truncates the file first: a scan may find it empty (recorded without a
    hash). The next generation is still a rewrite of the last bytes read whole: new generation,
    its own kept version."""
    ws = Workspace(tmp_path)
    best = save(ws, keras_checkpoints, 1)
    _config, store = scan(ws)
    store.close()
    best.write_bytes(b"")
    os.utime(best, (1_000_000_000, 1_000_000_000))  # settled: judged corrupt, not incomplete
    _config, store = scan(ws)
    assert store.reads.get(str(best)).status.value == "corrupt"
    store.close()
    save(ws, keras_checkpoints, 2)
    _config, store = scan(ws)
    assert store.reads.get(str(best)).generation == 2
    kept = store.versions.versions_of(str(best))
    assert [(v.generation, v.status) for v in kept] == [(1, "ok"), (2, "standby")]
    assert Path(kept[1].path).read_bytes() == best.read_bytes()
    store.close()


def test_a_torch_version_found_after_a_crash_carries_its_generations_own_epoch(
    tmp_path: Path,
) -> None:
    """A copy of `best.pt` (kept as `best.pt.v1`: no Keras suffix) that got its name but not
    its row before a crash, found once the file was rewritten: adopted (it was trashed as
    unknown), with the epoch and val_loss its own bytes recorded (issue 39), so `restore
    --epoch 0` finds it."""
    import subprocess
    import sys

    ws, gate = Workspace(tmp_path), tmp_path / "gate"
    gate.mkdir()
    run = ws.root / "loop"
    loop = Path(__file__).resolve().parents[1] / "support" / "torch_loop.py"
    with subprocess.Popen([sys.executable, str(loop), str(run), "2", "--gate", str(gate)]) as job:
        for epoch in (0, 1):
            deadline = time.monotonic() + 300
            while not (gate / f"saved-{epoch}").exists() and job.poll() is None:
                assert time.monotonic() < deadline, "the loop did not save"
                time.sleep(0.05)
            ws.run("scan")
            if epoch == 0:
                first = (run / "best.pt").read_bytes()  # generation 1: epoch 0, val_loss 1.0
            (gate / f"go-{epoch}").touch()
        assert job.wait(timeout=120) == 0
    kept = ws.root / ".ckpt-versions" / "loop" / "best.pt.v1"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(first)  # our copy, its row lost in the crash
    ws.run("scan")  # the reconcile at its start adopts it
    [row] = [r for r in ws.json("list", "--versions") if r["version_of"]]
    assert row["path"] == str(kept) and row["version_of"] == str(run / "best.pt")
    assert (row["epoch"], row["metrics"].get("val_loss")) == (0, 1.0), row
    ws.run("restore", str(run / "best.pt"), "--epoch", "0")
    assert (run / "best.pt").read_bytes() == first


def test_a_restore_killed_after_its_move_settles_with_its_copies_standby_again(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """`ckpt trash restore` killed after the files are back, before the catalog says so: the
    next reconcile settles the row `ok` and the kept copy of the bytes the file holds again is
    `standby` (a spare the disk guard frees first), as an uninterrupted restore leaves it."""
    ws = Workspace(tmp_path)
    config, best = three_generations(ws, keras_checkpoints)
    store = Store(config.database)
    row = store.reads.get(str(best))
    with rail.run_lease(config, store, guards.run_id(store.reads, row), "test") as lease:
        rail.trash_checkpoint(
            config, store, row, reason="test", batch=rail.batch_name(), actor="test", lease=lease
        )
    assert {v.status for v in store.versions.versions_of(str(best))} == {"ok"}
    store.close()

    pid = os.fork()
    if pid == 0:  # the restore, dead between its move and its record
        try:
            child = Store(config.database)
            c = child.reads.get(str(row.id))
            info = c.details["trash"]
            with child.acts.audited(
                action="restore", checkpoint_id=c.id, path=c.path, reason=None,
                size=c.size_bytes, actor="test", lease=None,
            ):  # fmt: skip
                fsops.restore(ws.root, [Path(p) for p in info["paths"]], [Path(info["members"][0])])
                os._exit(0)
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0 and best.exists()

    store = Store(config.database)
    recovery.reconcile(config, store, store.versions)
    assert store.reads.get(str(row.id)).status == "ok"
    kept = {v.generation: v.status for v in store.versions.versions_of(str(best))}
    assert kept == {2: "ok", 3: "standby"}  # 3 is what the file holds again
    store.close()
