"""Issue 10, "Done when": real Keras 3 and tf-keras training runs, named as users name them, in
a root with a MINIMAL config (no templates, no metrics files): every checkpoint gets the right
epoch (and step) and every metric Keras logged for that epoch.

The truth is what the training callbacks saw (tests/support/training_runs.py), never the names
read back. One test per scenario, so a failure says which naming scheme is not understood.
A wrong epoch is always a failure; where nothing on disk tells the epoch, it must be None.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace
from tests.support.training_runs import CM_RUN, KERAS3, TFKERAS, load_truth

pytestmark = pytest.mark.slow
FLOAT32_REL = 1e-6
SCENARIOS = [
    *(f"keras3/{s['run']}" for s in KERAS3),
    f"keras3/{CM_RUN}",
    *(f"tfkeras/{s['run']}" for s in TFKERAS),
]
# The scheme a run's names must be read as (what the user wrote in ModelCheckpoint).
INFERRED_TEMPLATES = {
    "keras3/dash_acc": "model-{epoch:02d}-{val_accuracy:.3f}.keras",
    "keras3/keyvalue": "ckpt_epoch={epoch}_val_loss={val_loss:.4f}.weights.h5",
    "keras3/two_decimals": "{epoch:02d}-{loss:.4f}-{val_loss:.4f}.keras",
    "keras3/sci": "weights_{epoch:04d}_{val_loss:.3e}.keras",
    "keras3/constant": "run42-ep{epoch}.keras",
    "keras3/metric_first": "vl{val_loss:.3f}_ep{epoch:02d}.keras",
    "tfkeras/dash_acc": "model-{epoch:02d}-{accuracy:.2f}.h5",
}


def minimal_workspace(base: Path) -> Workspace:
    """Only the root (and where the catalog goes): nothing about naming or metrics. Completion
    without settling, because the copied files keep their (recent) training mtimes."""
    ws = Workspace(base)
    ws.config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {ws.root}\n"
        "completion:\n  settle_seconds: 0\n"
    )
    return ws


def copy_runs(ws: Workspace, runs: Path, *names: str) -> None:
    """The runs copied with their mtimes (copy2), at the same relative paths as the truth."""
    for name in names:
        shutil.copytree(runs / name, ws.root / name, copy_function=shutil.copy2)


class Scanned:
    def __init__(self, ws: Workspace, truth: dict[str, Any]) -> None:
        self.ws, self.truth = ws, truth
        self.scan = ws.run("scan", "--json", check=False)
        self.rows = {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list")}
        self.runs = {r["name"]: r for r in ws.json("runs")}


@pytest.fixture(scope="module")
def knows(tmp_path_factory: pytest.TempPathFactory, training_runs: Path) -> Scanned:
    ws = minimal_workspace(tmp_path_factory.mktemp("knows"))
    copy_runs(ws, training_runs, "keras3", "tfkeras")
    return Scanned(ws, load_truth(training_runs))


def truth_of_run(knows: Scanned, run: str) -> dict[str, dict[str, Any]]:
    found = {p: c for p, c in knows.truth["checkpoints"].items() if c["run"] == run}
    assert found, f"no truth for {run}"
    return found


def metric_problems(row: dict[str, Any], logs: dict[str, float]) -> list[str]:
    got = row["metrics"]
    missing = [name for name in sorted(logs) if got.get(name) is None]
    wrong = [
        f"{name}={got[name]!r} (want {value!r})"
        for name, value in sorted(logs.items())
        if got.get(name) is not None and got[name] != pytest.approx(value, rel=FLOAT32_REL)
    ]
    return ([f"metrics missing: {', '.join(missing)}"] if missing else []) + (
        [f"metrics wrong: {', '.join(wrong)}"] if wrong else []
    )


def checkpoint_problems(row: dict[str, Any] | None, truth: dict[str, Any]) -> list[str]:
    """What is wrong with one listed row, against what training recorded for that file."""
    if row is None:
        return ["not listed"]
    problems = [] if row["status"] == "ok" else [f"status {row['status']} ({row['reason']})"]
    want = truth["expect_epoch"]
    if row["epoch"] != want:
        # None where the evidence allows no epoch; any other value is a wrong epoch.
        problems.append(f"epoch {row['epoch']!r}, want {want!r} (by {truth['evidence']})")
    if "step" in truth and row["step"] != truth["step"]:
        problems.append(f"step {row['step']!r}, want {truth['step']!r}")
    if truth["batch"] is not None:
        # `{batch}` counts within the epoch; as a step the row may give it, or the global
        # step it stands for (the optimizer's iterations at that save).
        if row["step"] not in (truth["batch"], truth["iterations"]):
            problems.append(
                f"step {row['step']!r}, want batch {truth['batch']} or global step "
                f"{truth['iterations']}"
            )
        # Saved mid-epoch: the epoch's end-of-epoch logs do not describe it.
        if row["metrics"]:
            problems.append(f"mid-epoch checkpoint got metrics {row['metrics']}")
    elif want is None:
        if row["metrics"]:
            problems.append(f"no epoch known, yet metrics {row['metrics']}")
    else:
        problems += metric_problems(row, truth["logs"])
    return problems


@pytest.mark.parametrize("run", SCENARIOS)
def test_every_checkpoint_gets_its_epoch_and_every_logged_metric(knows: Scanned, run: str) -> None:
    assert knows.scan.returncode == 0, knows.scan.stdout + knows.scan.stderr
    problems = [
        f"{Path(path).name}: " + "; ".join(found)
        for path, truth in sorted(truth_of_run(knows, run).items())
        if (found := checkpoint_problems(knows.rows.get(path), truth))
    ]
    assert not problems, f"{run}: {len(problems)} checkpoint(s) wrong\n" + "\n".join(problems)


def test_the_scenarios_are_what_they_claim(knows: Scanned) -> None:
    """The test bed itself: gaps really happened, fixed names really were rewritten."""
    cps = knows.truth["checkpoints"]
    gaps = sorted(c["epoch"] for c in cps.values() if c["run"] == "keras3/best_gaps")
    assert gaps != list(range(gaps[0], gaps[-1] + 1)), gaps
    for name in ("keras3/best_last/best.keras", "tfkeras/best_last/best.h5"):
        epochs = [g["epoch"] for g in cps[name]["generations"]]
        assert len(epochs) >= 2 and epochs != list(range(1, len(epochs) + 1)), epochs
    assert len(cps["keras3/best_last/last.keras"]["generations"]) == 6
    assert {c["run"] for c in cps.values()} == set(SCENARIOS)


def normalised(template: str) -> str:
    """`{epoch:d}` and `{epoch}` print the same: compare schemes, not spellings."""
    return re.sub(r"\{(\w+):d\}", r"{\1}", template)


@pytest.mark.parametrize("run", sorted(INFERRED_TEMPLATES))
def test_runs_show_the_inferred_naming_scheme_with_evidence(knows: Scanned, run: str) -> None:
    assert run in knows.runs, sorted(knows.runs)
    naming = knows.runs[run].get("naming")
    assert isinstance(naming, list) and naming, f"{run}: naming {naming!r}"
    for scheme in naming:
        assert {"template", "origin", "members", "evidence"} <= set(scheme), scheme
    templates = [normalised(s["template"]) for s in naming]
    assert normalised(INFERRED_TEMPLATES[run]) in templates, json.dumps(naming, indent=1)
    (scheme,) = [
        s for s in naming if normalised(s["template"]) == normalised(INFERRED_TEMPLATES[run])
    ]
    members = scheme["members"]
    count = members if isinstance(members, int) else len(members)
    assert count == len(truth_of_run(knows, run)), scheme
    assert scheme["evidence"], scheme


def test_every_run_carries_a_naming_field(knows: Scanned) -> None:
    missing = [name for name, r in knows.runs.items() if not isinstance(r.get("naming"), list)]
    assert not missing, f"runs without a `naming` list: {missing}"


def test_best_of_an_experiment_covers_its_checkpoints_subfolder(knows: Scanned) -> None:
    exp = truth_of_run(knows, "keras3/exp/checkpoints")
    want = min(exp, key=lambda p: exp[p]["logs"]["val_loss"])
    result = knows.ws.run("best", "--metric", "val_loss", "--run", "keras3/exp", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert Path(result.stdout.strip()) == knows.ws.root / want
    doc = knows.ws.json("best", "--metric", "val_loss", "--run", "keras3/exp")
    assert doc["epoch"] == exp[want]["epoch"]
    assert doc["metrics"]["val_loss"] == pytest.approx(exp[want]["logs"]["val_loss"], rel=1e-6)


def test_reindex_rederives_names_after_a_template_is_configured(
    tmp_path: Path, training_runs: Path
) -> None:
    """Changing only the config (a template naming the value `name_acc`) and `scan --reindex`:
    the rows are read again by the new scheme; nothing else changed on disk."""
    ws = minimal_workspace(tmp_path)
    run = "keras3/dash_acc"
    copy_runs(ws, training_runs, run)
    ws.run("scan")
    before = {r["path"]: r for r in ws.json("list")}
    ws.config.write_text(
        ws.config.read_text().replace(
            f"  - path: {ws.root}\n",
            f"  - path: {ws.root}\n    filename_template: "
            '"model-{epoch:02d}-{name_acc:.3f}.keras"\n',
        )
    )
    result = ws.run("scan", "--reindex", "--json", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    cps = {p: c for p, c in load_truth(training_runs)["checkpoints"].items() if c["run"] == run}
    after = {r["path"]: r for r in ws.json("list")}
    assert after.keys() == before.keys()
    for path, c in cps.items():
        row = after[str(ws.root / path)]
        assert row["epoch"] == c["epoch"], row
        printed = float(Path(path).name.rsplit("-", 1)[1].removesuffix(".keras"))
        assert row["metrics"].get("name_acc") == pytest.approx(printed), row["metrics"]
        assert row["hash"] == before[str(ws.root / path)]["hash"]
