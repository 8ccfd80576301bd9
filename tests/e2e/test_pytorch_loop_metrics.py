"""Issue 41, items 1 and 2: a PyTorch user's own loop (tests/support/plain_torch_loop.py, real
torch in a child) saves `{"epoch": epoch, ...}` (0-based, as `for epoch in range(...)` gives)
in `ckpt_epoch{epoch:03d}.pt`, logs a 0-based `metrics.csv` and writes
`torch.utils.tensorboard` scalars (`Loss/train`, `Loss/val`, `Accuracy/val`, `LearningRate`)
at step `epoch`. Every logged value must sit at the epoch its checkpoint holds, in `list`,
`show`, `best`, `history`, `plot` and the web view (no phantom epoch), and a run whose only log
is TensorBoard has its metrics, under the names the user wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace
from tests.support.browser import web_page
from tests.support.torch_runs import close

pytestmark = pytest.mark.slow

CSV_NAMES = {"train_loss": "train_loss", "val_acc": "val_acc", "lr": "lr"}
TB_NAMES = {
    "Loss/train": "train_loss",
    "Loss/val": "val_loss",
    "Accuracy/val": "val_acc",
    "LearningRate": "lr",
}


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, torch_files: Path) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("loop"))
    for run in ("plain", "tbonly"):
        shutil.copytree(torch_files / "loop" / run, ws.root / run, copy_function=shutil.copy2)
    # The same run whose CSV was edited at epoch 2: a log that disagrees with the file.
    edited = shutil.copytree(
        torch_files / "loop" / "plain", ws.root / "edited", copy_function=shutil.copy2
    )
    csv = (edited / "metrics.csv").read_text().splitlines()
    csv[3] = ",".join(c if i != 2 else "0.31" for i, c in enumerate(csv[3].split(",")))
    (edited / "metrics.csv").write_text("\n".join(csv) + "\n")
    ws.run("scan")
    return ws


@pytest.fixture(scope="module")
def truth(torch_files: Path) -> dict[int, dict[str, Any]]:
    raw = json.loads((torch_files / "loop-truth" / "plain-truth.json").read_text())
    return {int(e): values for e, values in raw["epochs"].items()}


def _rows(ws: Workspace, run: str) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list", "--run", run)}


def test_every_csv_and_tensorboard_value_is_at_the_checkpoints_epoch(
    ws: Workspace, truth: dict[int, dict[str, Any]]
) -> None:
    for run, names in (("plain", {**CSV_NAMES, **TB_NAMES}), ("tbonly", TB_NAMES)):
        rows = _rows(ws, run)
        for epoch, t in truth.items():
            row = rows[t["file"]]
            assert row["epoch"] == epoch, row
            for name, field in names.items():
                assert close(row["metrics"].get(name), t[field]), (run, epoch, name, row)
            assert close(row["metrics"]["val_loss"], t["val_loss"]), row  # the file's own
    shown = ws.json("show", "plain/ckpt_epoch002.pt")
    assert close(shown["metrics"]["lr"], truth[2]["lr"]), shown
    assert shown["metric_sources"]["lr"] == "csv:plain/metrics.csv", shown
    assert shown["metric_sources"]["Loss/val"] == "tensorboard:plain/tb", shown


def test_best_answers_the_epoch_that_was_best(
    ws: Workspace, truth: dict[int, dict[str, Any]]
) -> None:
    best_epoch = max(truth, key=lambda e: truth[e]["val_acc"])
    for run, metric in (("plain", "val_acc"), ("plain", "Accuracy/val"), ("tbonly", "Loss/val")):
        found = ws.json("best", "--metric", metric, "--run", run)
        assert found["epoch"] == best_epoch, (run, metric, found)


def test_history_plot_and_web_curve_have_no_phantom_epoch(
    ws: Workspace, truth: dict[int, dict[str, Any]], tmp_path: Path
) -> None:
    best_epoch = max(truth, key=lambda e: truth[e]["val_acc"])
    history = ws.json("history", "--run", "plain", "--metric", "val_acc")
    epochs = {e["epoch"]: e["values"] for e in history["epochs"] if e["epoch"] is not None}
    assert set(epochs) == set(truth), epochs  # 0..4: no epoch 5
    for epoch, values in epochs.items():
        assert close(values["val_acc"], truth[epoch]["val_acc"]), (epoch, values)
    plotted = json.loads(
        ws.run(
            "plot",
            "--run",
            "tbonly",
            "--metric",
            "Accuracy/val",
            "-o",
            str(tmp_path / "p.png"),
            "--json",
        ).stdout
    )["series"][0]
    assert [e for e, _ in plotted["line"]] == sorted(truth), plotted
    assert {m["epoch"] for m in plotted["markers"] if m["mark"] == "best"} == {best_epoch}
    status, page = web_page(ws.config, "/api/run", run="plain", metric="val_acc")
    assert status == 200, page
    line = dict(page["series"]["line"])
    assert set(line) == set(truth), line
    assert all(close(line[e], truth[e]["val_acc"]) for e in truth), line


def test_a_log_that_disagrees_with_the_file_is_said_not_taken(ws: Workspace) -> None:
    shown = ws.json("show", "edited/ckpt_epoch002.pt")
    assert shown["metrics"]["val_loss"] == 0.3, shown  # the file's own value
    assert close(shown["metrics"]["val_acc"], 0.85), shown  # the other values: still epoch 2
    notes = " ".join(shown["notes"])
    assert "csv:edited/metrics.csv val_loss 0.31" in notes and "disagrees" in notes, notes
    found = ws.json("best", "--metric", "val_loss", "--run", "edited")
    assert found["epoch"] == 2 and found["metrics"]["val_loss"] == 0.3, found
