"""usecases.derivation and its catalog side on a real catalog (SQLite and PostgreSQL):
generations are kept, derivation is idempotent, and values derived for old bytes never land on
new ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.catalog.store_runs import Derivation
from ckpt_daemon.core.model import (
    CheckpointInfo,
    CheckpointStatus,
    FileStat,
    Format,
    IndexRecord,
    Kind,
    OptimizerInfo,
)
from ckpt_daemon.settings.config import RootConfig
from ckpt_daemon.usecases.derivation import RunRef, refresh_run
from tests.support import keras_csv

AT = "2026-12-01T00:00:00Z"


def _record(store: Store, root: Path, name: str, digest: str, iterations: int, mtime: int):
    info = CheckpointInfo(
        Format.KERAS_ZIP, Kind.FULL, optimizer=OptimizerInfo("Adam", iterations=iterations)
    )
    rec = IndexRecord(
        path=str(root / "run" / name),
        root=str(root),
        run="run",
        status=CheckpointStatus.OK,
        reason=None,
        stat=FileStat(100, mtime, 7),
        hash=digest,
        info=info,
        sighting=(mtime // 1000, False),
    )
    return store.index.record(rec, actor_name="test", at=AT)


@pytest.fixture
def store_and_run(tmp_path: Path, catalog_url: str) -> Iterator[tuple[Store, RunRef]]:
    root = tmp_path / "runs"
    (root / "run").mkdir(parents=True)
    rows = [{"epoch": e, "loss": 1.0 / (e + 1), "val_loss": 2.0 / (e + 1)} for e in range(4)]
    (root / "run" / "training.log").write_text(keras_csv(rows), newline="")
    store = Store(catalog_url)
    config = RootConfig(root, "inotify", 30.0, (), ("training.log",), None)
    yield store, RunRef(config, root / "run", "run")
    store.close()


def test_generations_are_kept_and_each_gets_its_epoch(store_and_run: tuple[Store, RunRef]) -> None:
    store, run = store_and_run
    for epoch in (1, 2, 3):  # last.keras rewritten at each epoch end, seen each time
        ckpt = _record(store, run.root.path, "last.keras", f"g{epoch}", 5 * epoch, 1000 * epoch)
    _record(store, run.root.path, "model.04.keras", "m4", 20, 4000)
    assert refresh_run(store.runs, store.versions, run, [], other_runs=(), at=AT) == 2
    shown = store.reads.get(str(ckpt))
    generations = shown.details["generations"]
    assert [g["generation"] for g in generations] == [1, 2, 3]
    assert [g["iterations"] for g in generations] == [5, 10, 15]
    assert [g["epoch"] for g in generations] == [1, 2, 3]
    assert shown.epoch == 3
    assert shown.details["epoch_source"] == "optimizer iterations (15 / 5 steps per epoch)"
    assert shown.metrics == {"loss": 1 / 3, "val_loss": 2 / 3}  # the CSV row of epoch 3
    # nothing changed: no write
    assert refresh_run(store.runs, store.versions, run, [], other_runs=(), at=AT) == 0


def test_values_derived_for_old_bytes_never_land_on_new_ones(
    store_and_run: tuple[Store, RunRef],
) -> None:
    store, run = store_and_run
    ckpt = _record(store, run.root.path, "best.keras", "old", 10, 2000)
    stale = Derivation(ckpt, "old", 2000, 2, None, (), {"epoch_source": "stale"})
    _record(store, run.root.path, "best.keras", "new", 15, 3000)  # a new generation meanwhile
    assert store.runs.set_derived_many([stale], at=AT) == 0
    row = store.reads.get(str(ckpt))
    assert row.epoch is None and "epoch_source" not in row.details
    fresh = Derivation(ckpt, "new", 3000, 3, None, (), {"epoch_source": "fresh"})
    assert store.runs.set_derived_many([fresh], at=AT) == 1
    assert store.reads.get(str(ckpt)).epoch == 3


def test_our_own_rewrite_keeps_the_generation(store_and_run: tuple[Store, RunRef]) -> None:
    store, run = store_and_run
    ckpt = _record(store, run.root.path, "model.02.keras", "raw", 10, 2000)
    store.acts.record_rewrite(ckpt, stat=FileStat(80, 2000, 8), digest="zstd", codec="zstd")
    generations = store.reads.get(str(ckpt)).details["generations"]
    assert [(g["generation"], g["hash"]) for g in generations] == [(1, "zstd")]


def test_a_rewritten_log_never_erases_a_generations_metrics(
    store_and_run: tuple[Store, RunRef],
) -> None:
    """Issue 21: a resumed job's CSVLogger (append=False) rewrites the log from the resumed epoch
    on. What each checkpoint's generation recorded stays; a later log that disagrees about an
    epoch is a new generation of the log: the checkpoint keeps the values it was written with,
    with a note; new bytes of the file take the log as it is."""
    store, run = store_and_run  # epochs 1-4: val_loss 2/e
    for epoch in (1, 2, 3):
        _record(store, run.root.path, f"model.{epoch:02d}.keras", f"m{epoch}", 5 * epoch, epoch)
    refresh_run(store.runs, store.versions, run, [], other_runs=(), at=AT)
    # Killed after epoch 1's save, resumed from epoch 1: epochs 2 and 3 logged again, 2 anew.
    rows = [
        {"epoch": 1, "loss": 0.9, "val_loss": 0.75},
        {"epoch": 2, "loss": 1 / 3, "val_loss": 2 / 3},
    ]
    (run.folder / "training.log").write_text(keras_csv(rows), newline="")
    refresh_run(store.runs, store.versions, run, [], other_runs=(), at=AT)
    by_name = {Path(m.path).name: m for m in store.runs.run_members(str(run.root.path), "run")}
    one, two, three = (by_name[f"model.{e:02d}.keras"] for e in (1, 2, 3))
    assert one.metrics["val_loss"] == (2.0 / 1, "csv:run/training.log")  # gone from the log
    assert two.metrics["val_loss"] == (2.0 / 2, "csv:run/training.log")  # the log disagrees
    assert any(
        "run/training.log was rewritten: epoch 2 val_loss 1 kept" in n and "now says 0.75" in n
        for n in two.details["notes"]
    ), two.details["notes"]
    assert three.metrics["val_loss"] == (2 / 3, "csv:run/training.log")  # the log agrees
    assert not any("rewritten" in n for n in three.details["notes"])
    # The resumed job saves epoch 2 again: new bytes, recorded afresh from the log as it is.
    _record(store, run.root.path, "model.02.keras", "m2-resumed", 10, 5)
    refresh_run(store.runs, store.versions, run, [], other_runs=(), at=AT)
    again = {Path(m.path).name: m for m in store.runs.run_members(str(run.root.path), "run")}
    assert again["model.02.keras"].metrics["val_loss"] == (0.75, "csv:run/training.log")
    assert again["model.01.keras"].metrics["val_loss"] == (2.0, "csv:run/training.log")
