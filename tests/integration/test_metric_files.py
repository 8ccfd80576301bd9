"""formats.metric_files: the metrics join (filename, CSV log, sidecar, metrics.json) over real
run folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_daemon.core.model import MetricValue
from ckpt_daemon.core.training_metrics import compile_template
from ckpt_daemon.formats.metric_files import MetricsResult, metrics_for
from tests.support import keras_csv

# --- metrics_for over real folders ------------------------------------------------------------

KERAS_TEMPLATE = compile_template("weights.{epoch:02d}-{val_loss:.2f}.hdf5")


def _by_name(result: MetricsResult) -> dict[str, MetricValue]:
    return {m.name: m for m in result.metrics}


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    rows: list[dict[str, object]] = [
        {"epoch": 0, "loss": 0.9, "val_loss": 0.81234},
        {"epoch": 1, "loss": 0.5, "val_loss": 0.23456},
        {"epoch": 2, "loss": 0.4, "val_loss": 0.2871},
    ]
    (run / "training.log").write_text(keras_csv(rows), newline="")
    return run


def test_csv_joined_by_epoch(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ckpt = run / "weights.02-0.23.hdf5"
    ckpt.write_bytes(b"x")
    result = metrics_for(ckpt, run, [KERAS_TEMPLATE], ["training.log", "*.csv"])
    assert (result.epoch, result.step) == (2, None)
    assert _by_name(result) == {  # filename epoch 2 <-> CSV row epoch 1
        "loss": MetricValue("loss", 0.5, "csv:training.log"),
        "val_loss": MetricValue("val_loss", 0.23456, "csv:training.log"),
    }
    assert result.notes == ()


def test_disagreement_note(tmp_path: Path) -> None:
    run = _run(tmp_path)
    result = metrics_for(run / "weights.03-0.23.hdf5", run, [KERAS_TEMPLATE], ["training.log"])
    assert _by_name(result)["val_loss"] == MetricValue("val_loss", 0.2871, "csv:training.log")
    assert result.notes == ("filename val_loss 0.23 disagrees with csv:training.log 0.2871",)


def test_filename_only_and_rounding_tolerance(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert metrics_for(run / "weights.07-0.29.hdf5", run, [KERAS_TEMPLATE], ["*.log"]) == (
        MetricsResult(7, None, (MetricValue("val_loss", 0.29, "filename"),), ())
    )
    (run / "metrics.json").write_text(json.dumps({"7": {"val_loss": 0.294999}}))
    result = metrics_for(run / "weights.07-0.29.hdf5", run, [KERAS_TEMPLATE], ["metrics.json"])
    assert _by_name(result)["val_loss"].source == "json:metrics.json"
    assert result.notes == ()  # within .2f rounding


def test_float32_repr_in_filename_agrees_with_csv(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.csv").write_text("epoch,val_loss\r\n0,0.2871000170707703\r\n")  # float32 0.2871
    template = compile_template("w.{epoch}-{val_loss}.h5")
    result = metrics_for(run / "w.1-0.2871.h5", run, [template], ["*.csv"])
    assert result.metrics == (MetricValue("val_loss", 0.2871000170707703, "csv:log.csv"),)
    assert result.notes == ()


def test_sidecar_precedence_and_epoch_override(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ckpt = run / "weights.02-0.23.hdf5"
    (run / "weights.02-0.23.hdf5.json").write_text(
        json.dumps({"val_loss": 0.2345, "epoch": 3, "custom": 7, "note": "hi"})
    )
    (run / "metrics.json").write_text(json.dumps({"epochs": {"3": {"loss": 0.11, "val_loss": 9}}}))
    result = metrics_for(ckpt, run, [KERAS_TEMPLATE], ["training.log", "*.json"])
    assert result.epoch == 3
    assert _by_name(result) == {
        "val_loss": MetricValue("val_loss", 0.2345, "sidecar:weights.02-0.23.hdf5.json"),
        "custom": MetricValue("custom", 7.0, "sidecar:weights.02-0.23.hdf5.json"),
        "loss": MetricValue("loss", 0.11, "json:metrics.json"),  # json beats the csv's 0.4
    }
    # The log's val_loss disagrees with the checkpoint's own record: said, never taken.
    assert result.notes == (
        "sidecar epoch 3 overrides filename epoch 2",
        "json:metrics.json val_loss 9 at this epoch disagrees with the"
        " sidecar:weights.02-0.23.hdf5.json's 0.2345: the sidecar:weights.02-0.23.hdf5.json's is"
        " used",
    )


def test_tf_prefix_and_metrics_json_by_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt-2.index").write_bytes(b"")
    (run / "metrics.json").write_text(
        json.dumps([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}, {"epoch": 2, "acc": 1}])
    )
    for name in ("ckpt-2", "ckpt-2.index", "model.ckpt-2"):
        result = metrics_for(run / name, run, [], ["metrics.json"])
        assert (result.epoch, result.step) == (None, 2)
        assert result.metrics == (MetricValue("loss", 0.5, "json:metrics.json"),)
    templated = metrics_for(run / "ckpt-2", run, [compile_template("ckpt-{step}")], [])
    assert templated.step == 2


@pytest.mark.parametrize(
    ("name", "epoch", "step"),
    [
        ("epoch_003.keras", 3, None),
        ("weights-epoch-12.h5", 12, None),
        ("e03.weights.h5", 3, None),
        ("model_e10.keras", 10, None),
        ("model.ckpt-123", None, 123),
        ("step_500.weights.h5", None, 500),
        ("lr1e05.h5", None, None),
        ("base3.keras", None, None),
        ("best.keras", None, None),
    ],
)
def test_fallback_names(tmp_path: Path, name: str, epoch: int | None, step: int | None) -> None:
    result = metrics_for(tmp_path / name, tmp_path, [KERAS_TEMPLATE], [])
    assert (result.epoch, result.step) == (epoch, step)


def test_mid_epoch_checkpoint_not_joined_to_epoch_rows(tmp_path: Path) -> None:
    run = _run(tmp_path)
    template = compile_template("b.e{epoch:02d}-b{batch:03d}.weights.h5")
    result = metrics_for(run / "b.e02-b003.weights.h5", run, [template], ["training.log"])
    assert (result.epoch, result.metrics) == (2, ())
    assert result.notes == ("mid-epoch checkpoint (batch 3): epoch rows not joined",)


def test_garbage_files_are_ignored(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "training.log").write_bytes(bytes(range(256)) * 4)  # binary, not UTF-8
    (run / "latin1.csv").write_bytes("epoch,val_pr\xe9cision\n0,0.5\n".encode("latin-1"))
    (run / "ok.csv").write_text("epoch;val_loss\n0;0.3\n")  # ';' sniffed from the header
    (run / "metrics.json").write_text("{not json")
    (run / "deep.json").write_text("[" * 100_000)
    (run / "weights.01-0.30.hdf5.json").write_bytes(b"\xff\xfe{}")
    (run / "dir.csv").mkdir()
    (run / "nul.csv").write_bytes(b"epoch,val_loss\x00,x\x01y\n0,0.1,0.2\n")  # junk names dropped
    (run / "gone.csv").symlink_to(run / "nowhere.csv")
    (run / "loop.csv").symlink_to(run / "loop.csv")
    result = metrics_for(
        run / "weights.01-0.30.hdf5",
        run,
        [KERAS_TEMPLATE],
        ["training.log", "*.csv", "*.json", "missing.json", "/abs/*.csv", "a**b/x"],
    )
    assert result.epoch == 1
    assert _by_name(result) == {"val_loss": MetricValue("val_loss", 0.3, "csv:ok.csv")}
    notes = "\n".join(result.notes)
    for expected in (
        "training.log: not UTF-8",
        "latin1.csv: not UTF-8",
        "metrics.json: invalid",
        "deep.json: invalid",
        "weights.01-0.30.hdf5.json: not UTF-8",
        "/abs/*.csv",
    ):
        assert expected in notes


def test_unreadable_file_is_ignored(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "training.log").chmod(0)
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from ckpt_daemon.core.training_metrics import compile_template\n"
        "from ckpt_daemon.formats.metric_files import metrics_for\n"
        "run = Path(sys.argv[1])\n"
        "r = metrics_for(run / 'weights.02-0.23.hdf5', run, [compile_template(sys.argv[2])],"
        " ['training.log'])\n"
        "print(json.dumps({'metrics': [[m.name, m.value, m.source] for m in r.metrics],"
        " 'notes': list(r.notes)}))\n"
    )
    cmd = [sys.executable, "-c", script, str(run), KERAS_TEMPLATE.text]
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that bypass permissions
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert out["metrics"] == [["val_loss", 0.23, "filename"]]
    assert any("training.log: unreadable" in n for n in out["notes"])


def test_missing_run_dir_never_raises(tmp_path: Path) -> None:
    result = metrics_for(tmp_path / "nope" / "e05.keras", tmp_path / "nope", [], ["*.csv"])
    assert (result.epoch, result.step, result.metrics) == (5, None, ())
    assert all("cannot list" in note for note in result.notes)
