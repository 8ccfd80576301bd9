"""Issue 41, items 5 and 6, on real runs: an HF Trainer run as most users run it (TensorBoard
events beside `trainer_state.json`, tests/support/hf_runs.py) and a Lightning run
(tests/support/torch_runs.py: ModelCheckpoint with `save_last`).

- 5: `ckpt list --run <hf run>` fits 100 columns with `eval_loss` shown: the default metric
  columns are the ones checkpoints are chosen by; `--metrics all` shows the rest; an unknown
  metric is an error naming the ones there; `ckpt runs` names a best only for metrics with a
  direction.
- 6: `ckpt best` and `ckpt latest` answer Lightning's epoch file, not `last.ckpt` of the same
  moment (rewritten at the next save), and say so in `--json` (`preferred_over`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import Workspace

pytestmark = pytest.mark.slow

UNDIRECTED = ("learning_rate", "runtime", "flos", "samples_per_second", "grad_norm", "epoch")


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, hf_runs: Path, torch_files: Path) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("quiet"))
    shutil.copytree(hf_runs / "trainer-tb", ws.root / "hf", copy_function=shutil.copy2)
    shutil.copytree(torch_files / "pl", ws.root / "pl", copy_function=shutil.copy2)
    ws.run("scan")
    return ws


def test_an_hf_run_lists_in_100_columns_with_eval_loss(ws: Workspace) -> None:
    listed = ws.run("list", "--run", "hf").stdout.splitlines()
    header = listed[0].split()
    assert "eval_loss" in header and "eval_accuracy" in header, listed
    assert max(len(line) for line in listed) <= 100, "\n".join(listed)
    assert not any(word in name for name in header for word in UNDIRECTED), header
    assert not any("/" in name for name in header[1:] if name != "PATH"), header
    every = ws.run("list", "--run", "hf", "--metrics", "all").stdout.splitlines()[0].split()
    assert {"eval/runtime", "learning_rate", "train/total_flos"} <= set(every), every
    # HF's TensorBoard copies, keyed by global step, sit at the checkpoint of that step.
    for row in ws.json("list", "--run", "hf"):
        metrics = row["metrics"]
        assert metrics["train/loss"] == pytest.approx(metrics["loss"], rel=1e-6), row
        assert metrics["eval/loss"] == pytest.approx(metrics["eval_loss"], rel=1e-6), row
    typo = ws.run("list", "--run", "hf", "--metrics", "eval_los", check=False)
    assert typo.returncode == 2 and "eval_loss" in typo.stderr, typo.stderr


def test_runs_names_a_best_only_for_metrics_with_a_direction(ws: Workspace) -> None:
    best_lines = [  # `  best FILE: NAME VALUE, ...`: the metrics' part
        line.split(": ", 1)[1] for line in ws.run("runs").stdout.splitlines() if "best " in line
    ]
    assert best_lines and any("eval_loss" in line for line in best_lines), best_lines
    assert not any(word in line for line in best_lines for word in UNDIRECTED), best_lines
    hf = next(r for r in ws.json("runs") if r["name"].startswith("hf"))
    assert "eval_loss" in hf["best"], hf
    assert not any(word in name for name in hf["best"] for word in UNDIRECTED), hf["best"]


def test_best_and_latest_prefer_the_epoch_file_to_last_ckpt(ws: Workspace) -> None:
    for args in (("best", "--metric", "val_loss"), ("latest",)):
        found = ws.json(*args, "--run", "pl")
        name = Path(found["path"]).name
        assert name.startswith("epoch=") and name != "last.ckpt", found
        said = found["preferred_over"]
        assert said is not None and said["path"].endswith("/last.ckpt"), found
        assert name in said["why"] and f"epoch {found['epoch']}" in said["why"], said
        assert ws.run(*args, "--run", "pl").stdout.strip() == found["path"]
    pl = next(r for r in ws.json("runs") if r["name"].startswith("pl"))
    assert Path(pl["best"]["val_loss"]).name.startswith("epoch="), pl["best"]  # not last.ckpt
    # A winner that is not rewritten says nothing was passed over.
    assert ws.json("best", "--metric", "eval_loss", "--run", "hf")["preferred_over"] is None
