"""`ckpt history`, `plot` and `du` on a real Keras 3 run (`save_best_only`, so epochs 3, 6 and 7
have no checkpoint) after what happens to checkpoints: one pinned, three trashed by retention,
one deleted (missing), one kept as a version, one split (an inference artifact). In-process
through the API on a real SQLite catalog; the epochs' values are checked against the CSVLogger
log Keras wrote, the checkpoints' epochs against the training callbacks' truth, the PNG by
decoding it, and `du` against the bytes of the files on disk."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from ckpt_daemon.api import Catalog, open_catalog
from ckpt_daemon.cli import plot_png
from ckpt_daemon.core.errors import NotFound, UsageError
from ckpt_daemon.core.history import History, Series, series
from ckpt_daemon.core.retention import KeepBest, Policy
from ckpt_daemon.core.usage import usage_json
from tests.support.training_runs import load_truth

RUN, OTHER = "best_gaps", "best_last"
FLOAT32_REL = 1e-6


@dataclass
class Looked:
    cat: Catalog
    root: Path
    by_epoch: dict[int, Path]  # the run's checkpoints by their true epoch
    logged: dict[int, dict[str, float]]  # training.log, 1-based epochs
    version: Path


@pytest.fixture(scope="module")
def looked(tmp_path_factory: pytest.TempPathFactory, training_runs: Path) -> Iterator[Looked]:
    base = tmp_path_factory.mktemp("history")
    root = base / "runs"
    for name in (RUN, OTHER):
        shutil.copytree(training_runs / "keras3" / name, root / name, copy_function=shutil.copy2)
    config = base / "config.yaml"
    config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {root}\ncompletion:\n  settle_seconds: 0\n"
    )
    truth = load_truth(training_runs)["checkpoints"]
    by_epoch = {
        c["epoch"]: root / Path(p).relative_to("keras3")
        for p, c in truth.items()
        if c["run"] == f"keras3/{RUN}"
    }
    assert sorted(by_epoch) == [1, 2, 4, 5, 8, 9]
    with (root / RUN / "training.log").open() as fh:
        logged = {
            int(r["epoch"]) + 1: {k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)
        }
    cat = open_catalog(str(config))
    # A fixed name its trainer rewrites in place: epoch 4's model, then epoch 5's. The service
    # keeps each generation (`.ckpt-versions/RUN/best.v1.keras` is epoch 4's, a version now).
    fixed = root / RUN / "best.keras"
    epoch5 = by_epoch[5].read_bytes()
    shutil.copy2(by_epoch[4], fixed)
    # Not byte for byte epoch 4's file: a generation that is a checkpoint kept at another path
    # is not copied (issue 39). A zip reader skips the tail; the trainer's mtime is kept.
    with fixed.open("ab") as tail:
        tail.write(b"\0")
    shutil.copystat(by_epoch[4], fixed)
    cat.scan()
    fixed.write_bytes(epoch5)
    Path(f"{fixed}.json").write_text(json.dumps({"epoch": 5}))
    cat.scan()
    cat.pin(str(by_epoch[4]))
    # Keeps epochs 8, 9 and 5 (best.keras and best-05: one moment), the pinned 4 and v1.
    cat.prune([RUN], Policy(keep_last=3))
    by_epoch[8].unlink()
    version = root / ".ckpt-versions" / RUN / "best.v1.keras"
    cat.scan()
    cat.split(str(by_epoch[9]))
    try:
        yield Looked(cat, root, by_epoch, logged, version)
    finally:
        cat.close()


def test_every_epoch_has_its_logged_values_and_every_checkpoint_its_marks(looked: Looked) -> None:
    h = looked.cat.history(RUN)
    assert h.metrics == (("val_loss", "min"), ("loss", "min"))
    assert [r.epoch for r in h.rows] == list(range(1, 10))  # epochs 3, 6, 7: no checkpoint
    for row in h.rows:
        for name in ("val_loss", "loss"):
            assert math.isclose(
                row.values[name], looked.logged[row.epoch or 0][name], rel_tol=FLOAT32_REL
            ), (row.epoch, name)
    marks = {(m.checkpoint.epoch, m.checkpoint.path): m.marks for m in h.checkpoints}
    p = {e: str(path) for e, path in looked.by_epoch.items()}
    assert marks == {
        (1, p[1]): ("trashed",),
        (2, p[2]): ("trashed",),
        (4, p[4]): ("pinned", "kept"),
        (4, str(looked.version)): ("version",),
        (5, p[5]): ("kept",),  # the epoch of best.keras: keep_last keeps its every file
        (5, str(looked.root / RUN / "best.keras")): ("kept",),
        (8, p[8]): ("missing",),
        (9, p[9]): ("best", "kept"),
    }
    assert not [r for r in h.rows if r.epoch in (3, 6, 7) and r.checkpoints]


def test_a_plan_given_the_runs_history_is_the_plan_that_lists_it(looked: Looked) -> None:
    """The web view's run page plans with the rows its history read (`plan_prune(history=)`):
    the same decisions as `ckpt prune --dry-run`, with a version kept in `.ckpt-versions`, a
    pinned, trashed, missing and split checkpoint among them."""
    policy = Policy(keep_last=2, keep_best=(KeepBest("val_loss", 1),))
    for run in (RUN, OTHER):
        history = looked.cat.history(run)
        listed = looked.cat.plan_prune([run], policy).as_dict()
        assert listed["runs"] and listed["runs"][0]["decisions"]
        assert looked.cat.plan_prune([run], policy, history=history).as_dict() == listed


def test_the_audit_log_filtered_in_sql_is_the_log_filtered(looked: Looked) -> None:
    """`log(action=, state=, actor=)` (the web view's log and disk pages) answers what filtering
    the whole log would, newest `limit` last."""
    every = looked.cat.log()
    assert {e["action"] for e in every} >= {"indexed", "trash", "pin"}
    for key in ("action", "state", "actor"):
        for value in {e[key] for e in every}:
            wanted = [e for e in every if e[key] == value]
            assert looked.cat.log(**{key: value}) == wanted
            assert (
                looked.cat.log(RUN, 2, **{key: value})
                == [e for e in wanted if e["run"] == RUN][-2:]
            )
    assert looked.cat.log(actor="nobody") == []


def test_a_run_is_one_run_and_must_exist(looked: Looked) -> None:
    with pytest.raises(UsageError, match=r"covers 2 runs: best_gaps .*, best_last"):
        looked.cat.history(".")
    with pytest.raises(NotFound, match="no checkpoint of run 'best'"):
        looked.cat.history("best")  # a name prefix is not a run
    # The run's versions folder is part of the run, never a run of its own.
    whole = {m.checkpoint.id for m in looked.cat.history(RUN).checkpoints}
    versions = looked.cat.history(f"{RUN}/.ckpt-versions")
    assert versions.run == RUN and {m.checkpoint.id for m in versions.checkpoints} == whole


def plotted(looked: Looked) -> tuple[list[History], list[Any]]:
    found = [looked.cat.history(run, ["val_loss"]) for run in (RUN, OTHER)]
    return found, [series(h, "val_loss") for h in found]


def test_the_plot_draws_every_checkpoint_of_every_run(looked: Looked) -> None:
    found, drawn = plotted(looked)
    for h, s in zip(found, drawn, strict=True):
        every = {m.checkpoint.id for m in h.checkpoints}
        assert {i for *_, i in s.markers} == every and not s.unplaced, s.run
        assert [e for e, _ in s.line] == [r.epoch for r in h.rows]
    marks = {mark for s in drawn for mark, *_ in s.markers}
    assert marks == {"best", "pinned", "trashed", "missing", "version", "kept"}
    bare = plot_png.render(drawn, "val_loss", marks=())
    image = Image.open(io.BytesIO(bare.png))
    assert image.format == "PNG" and image.size == (900, 500) and not bare.at
    lines = image.convert("RGB")
    placed = {}
    for mark in marks:  # one mark at a time: markers at one place do not hide each other
        # (`ckpt plot` draws them all: tests/e2e/test_cli_contract.py decodes its PNG)
        drawn_one = plot_png.render(drawn, "val_loss", marks={mark})
        image = Image.open(io.BytesIO(drawn_one.png)).convert("RGB")
        assert set(drawn_one.at) == {i for s in drawn for k, *_, i in s.markers if k == mark}
        for ident, (x, y) in drawn_one.at.items():
            # The marker changes the pixels around its place: it is drawn where its value is.
            box = (int(x) - 3, int(y) - 3, int(x) + 4, int(y) + 4)
            assert image.crop(box).tobytes() != lines.crop(box).tobytes(), (mark, ident)
            placed[ident] = (x, y)
    assert set(placed) == {i for s in drawn for *_, i in s.markers}


def on_disk(folder: Path, pattern: str) -> tuple[int, int]:
    files = [f for f in folder.rglob(pattern) if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def test_du_is_the_bytes_on_disk(looked: Looked) -> None:
    doc = usage_json(looked.cat.du())
    (root,) = doc["roots"]
    runs = {r["run"]: r for r in root["runs"]}
    assert list(runs) == sorted(runs, key=lambda n: -runs[n]["bytes"])  # biggest first
    run_dir = looked.root / RUN
    kept = [f for f in run_dir.glob("best*.keras") if ".inference." not in f.name]
    assert runs[RUN]["by_kind"]["checkpoint"] == sum(f.stat().st_size for f in kept)
    assert runs[RUN]["files"]["checkpoint"] == len(kept) == 4
    assert (runs[RUN]["files"]["inference"], runs[RUN]["by_kind"]["inference"]) == on_disk(
        run_dir, "*.inference.*"
    )  # the artifact and its model card beside it
    assert (runs[RUN]["files"]["version"], runs[RUN]["by_kind"]["version"]) == on_disk(
        looked.root / ".ckpt-versions" / RUN, "*.keras"
    )  # the kept version and the standby copy of what best.keras holds now
    assert (runs[RUN]["files"]["trash"], runs[RUN]["by_kind"]["trash"]) == on_disk(
        looked.root / ".ckpt-trash", "*.keras"
    )
    assert runs[OTHER]["by_kind"] == {
        "checkpoint": on_disk(looked.root / OTHER, "*.keras")[1],
        "inference": 0,
        # its best.keras and last.keras are fixed names: their generations are kept
        "version": on_disk(looked.root / ".ckpt-versions" / OTHER, "*.keras")[1],
        "trash": 0,
    }
    assert root["bytes"] == doc["bytes"] == sum(r["bytes"] for r in runs.values())


def test_names_are_drawn_as_data_never_as_mathtext() -> None:
    hostile = Series(
        "exp_$\\frac{$_\x1b[31m",
        "val_$loss",
        "min",
        ((1, 0.5), (2, 0.4)),
        (("best", 2, 0.4, 7),),
        (),
    )
    rendered = plot_png.render([hostile], "val_$loss")  # a bad `$...$` would raise here
    assert Image.open(io.BytesIO(rendered.png)).size == (900, 500) and set(rendered.at) == {7}
