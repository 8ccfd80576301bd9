"""Issue 20 item 7: a step-like label before the epoch (`ckpt.{epoch:02d}.keras`,
`ckpt-{epoch:02d}.h5`, `iter_{epoch}.keras`) is no save counter in a Keras file: the number times
the steps per epoch is the file's optimizer iterations, so it is the epoch, and the run's log
rows attach (CSVLogger, or the TensorBoard callback's `logs/train` and `logs/validation` alone).
A TF CheckpointManager's `ckpt-N` still counts saves; with TensorBoard logs alone its epoch comes
from the step the validation values were logged at, and the train values attach too.

Real Keras 3 and tf-keras runs in child processes (tests/support/labelled_runs.py), scanned by
the CLI with a minimal config (no templates, no metrics files).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace
from tests.support.labelled_runs import generate

pytestmark = pytest.mark.slow
FLOAT32_REL = 1e-6


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("labelled")
    return out, generate(out)


@pytest.fixture(scope="module")
def scanned(
    tmp_path_factory: pytest.TempPathFactory, runs: tuple[Path, dict[str, dict[str, Any]]]
) -> tuple[Workspace, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    out, truth = runs
    base = tmp_path_factory.mktemp("labelled-ws")
    ws = Workspace(base)
    ws.config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {ws.root}\n"
        "completion:\n  settle_seconds: 0\n"
    )
    for framework in ("keras3", "tfkeras"):
        shutil.copytree(out / framework, ws.root / framework, copy_function=shutil.copy2)
    ws.run("scan")
    rows = {}
    for row in ws.json("list"):
        rel = Path(row["path"]).relative_to(ws.root).as_posix()
        rows[rel] = rows[f"{rel}.index"] = row  # a TF checkpoint is listed by its prefix
    return ws, truth, rows


RUNS = [
    "keras3/ckpt_dot",
    "keras3/ckpt_dash",
    "keras3/iter_label",
    "keras3/ckpt_tb",
    "keras3/manager_tb",
    "tfkeras/ckpt_dot",
    "tfkeras/ckpt_dash",
    "tfkeras/ckpt_tb",
]


@pytest.mark.parametrize("run", RUNS)
def test_each_file_gets_its_epoch_and_every_logged_metric(scanned: Any, run: str) -> None:
    _ws, truth, rows = scanned
    files = {rel: t for rel, t in truth.items() if t["run"] == run}
    assert len(files) == 4, sorted(truth)
    problems = []
    for rel, want in sorted(files.items()):
        row = rows.get(rel)
        if row is None:
            problems.append(f"{rel}: not listed")
            continue
        if row["epoch"] != want["epoch"]:
            problems.append(f"{rel}: epoch {row['epoch']!r}, want {want['epoch']}")
        got = row["metrics"]
        missing = sorted(name for name in want["logs"] if got.get(name) is None)
        wrong = sorted(
            name
            for name, value in want["logs"].items()
            if got.get(name) is not None and got[name] != pytest.approx(value, rel=FLOAT32_REL)
        )
        if missing or wrong:
            problems.append(f"{rel}: metrics missing {missing}, wrong {wrong} (got {got})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("run", [r for r in RUNS if not r.endswith("manager_tb")])
def test_a_keras_file_is_never_said_to_count_saves(scanned: Any, run: str) -> None:
    ws, truth, _rows = scanned
    rel = min(r for r, t in truth.items() if t["run"] == run)
    shown = ws.run("show", str(ws.root / rel)).stdout
    assert "counts saves" not in shown, shown
    assert "epoch from file name" in shown and "is the epoch" in shown, shown


def test_a_checkpoint_manager_number_still_counts_saves(scanned: Any) -> None:
    """The label keeps its TF meaning: the step is the optimizer's, the name's number the
    save's; the epoch comes from the logs (the step its validation values were logged at)."""
    ws, truth, rows = scanned
    row = rows["keras3/manager_tb/ckpt-2.index"]
    assert row["step"] == truth["keras3/manager_tb/ckpt-2.index"]["iterations"] == 6
    shown = ws.run("show", row["path"]).stdout
    assert "the log's epoch ending at step 6" in shown, shown
