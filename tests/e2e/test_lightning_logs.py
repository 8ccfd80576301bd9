"""Lightning's CSVLogger `logs/version_N/metrics.csv` (sparse rows, 0-based epochs) and its
TensorBoardLogger `tb/version_N/events.out.tfevents.*` (step = global_step - 1, an `epoch` scalar
beside every value) found beside the checkpoints with no configuration and joined to them by
epoch, as Lightning numbers both (tests/support/torch_runs.py: a real Trainer with
ModelCheckpoint, CSVLogger and TensorBoardLogger)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from tests.support import Workspace
from tests.support.torch_runs import LIGHTNING_TRUTH, close, load_truth


def _logged(metrics_csv: Path) -> dict[int, dict[str, float]]:
    """What the CSV says per epoch, read here with the csv module: later non-empty cells win."""
    out: dict[int, dict[str, float]] = {}
    with metrics_csv.open() as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v and k not in ("epoch", "step")}
            out.setdefault(int(row["epoch"]), {}).update(values)
    return out


def test_csv_logger_metrics_join_the_checkpoints_by_lightnings_epoch(
    workspace: Workspace, torch_files: Path
) -> None:
    ws = workspace
    shutil.copytree(torch_files / "pl", ws.root / "pl")
    # The same run with its TensorBoard events only: what they say must be what the CSV says.
    shutil.copytree(torch_files / "pl", ws.root / "tb-only", ignore=shutil.ignore_patterns("logs"))
    ws.run("scan")
    logged = _logged(ws.root / "pl" / "logs" / "version_0" / "metrics.csv")
    truth = load_truth(torch_files / "pl" / LIGHTNING_TRUTH)
    listed = ws.json("list")
    rows = {Path(r["path"]).name: r for r in listed if r["path"].startswith(str(ws.root / "pl"))}
    from_tb = {Path(r["path"]).name: r for r in listed if "/tb-only/" in r["path"]}
    for name, t in truth["files"].items():
        row = from_tb[name]
        assert close(row["metrics"]["train_loss"], logged[t["epoch"]]["train_loss"]), row
        assert close(row["metrics"]["val_loss"], logged[t["epoch"]]["val_loss"]), row
        assert set(row["metrics"]) == {"train_loss", "val_loss"}, row  # `epoch`: a counter
    shown = ws.json("show", str(from_tb[next(iter(truth["files"]))]["id"]))
    assert shown["metric_sources"]["train_loss"] == "tensorboard:tb-only/tb/version_0", shown
    for name, t in truth["files"].items():
        row = rows[name]
        shown = ws.json("show", str(row["id"]))
        assert close(row["metrics"]["train_loss"], logged[t["epoch"]]["train_loss"]), row
        assert shown["metric_sources"]["train_loss"] == "csv:pl/logs/version_0/metrics.csv"
        assert close(row["metrics"]["val_loss"], logged[t["epoch"]]["val_loss"])
        assert "step" not in row["metrics"] and "epoch" not in row["metrics"]
    history = ws.json("history", "--run", "pl/ckpts")
    by_epoch = {e["epoch"]: e["values"] for e in history["epochs"]}
    assert set(by_epoch) == set(logged)  # epoch 0 too: Lightning's epochs are 0-based
    for epoch, values in logged.items():
        assert close(by_epoch[epoch]["val_loss"], values["val_loss"]), (epoch, by_epoch)
