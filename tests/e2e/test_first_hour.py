"""Issue 21, "the first hour", driven through the CLI as a new user drives it.

A real training script (tests/support/first_hour_training.py: Keras 3 or tf-keras `fit()` for 10
epochs with `ModelCheckpoint("ckpt/model-{epoch:03d}-{val_accuracy:.4f}.keras")`, a weights-only
`weights/w-{epoch:02d}.weights.h5`, `best.h5` with `save_best_only`, `CSVLogger("history.csv")`
and `BackupAndRestore`), laid out `nested` (`exp/ckpt/`, `exp/weights/`, `exp/history.csv`,
`exp/best.h5`) or `flat` (all in `exp/`), killed by SIGKILL after epoch 7 and resumed in a new
process: CSVLogger (`append=False`) rewrites `history.csv` from epoch 8 on. `ckpt scan` runs
after the kill and after the resume, as a user's cron or the daemon would. One job per
framework writes both layouts (each into its own root and catalog) in the same `fit()`, and the
files the tests load are loaded in one child per framework: six TensorFlow processes, not 14.

1. `latest --resumable` names a file that really resumes: loaded in a child with `load_model`,
   its optimizer is the compiled Adam at the iteration the catalog says (Keras 3 drops the
   optimizer from the compile config of every `.keras` saved after `best.h5` in one process);
2. the CSV log above `exp/ckpt/` and `exp/weights/` is theirs: every numbered checkpoint has its
   epoch's `val_loss`, `best` and `history` answer from it;
3. the metrics of epochs 1-7, recorded before the resume, survive the rewrite of the log;
4. `prune --keep-last 3` keeps the last three epochs, every file of each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import Workspace, forked_python
from tests.support.first_hour_training import EPOCHS, KILLED_AFTER
from tests.support.training_runs import child_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "first_hour_training.py"
TRAIN_TIMEOUT_S = 600
SCENARIOS = [
    ("keras3", "nested"),
    ("keras3", "flat"),
    ("tfkeras", "nested"),
    ("tfkeras", "flat"),
]
SIGKILL = -9


@dataclass
class Trained:
    framework: str
    layout: str
    ws: Workspace
    exp: Path
    truth: dict[int, dict[str, Any]]  # epoch -> {"logs": ..., "phase": ...}
    before_resume: list[dict[str, Any]]  # `list --json` after the kill's scan
    loaded: dict[str, tuple[str, int]] = field(default_factory=dict)  # load_model, done ahead
    answers: dict[tuple[str, ...], Any] = field(default_factory=dict)  # read-only --json

    @property
    def numbered_runs(self) -> list[str]:
        return ["exp/ckpt", "exp/weights"] if self.layout == "nested" else ["exp"]

    def rows(self) -> list[dict[str, Any]]:
        """The experiment's checkpoints (not the kept versions), by path."""
        return [r for r in self.read("list", "--run", "exp") if r["version_of"] is None]

    def read(self, *args: str) -> Any:
        """`ckpt ARGS --json` of a read-only command, asked once: no test changes the catalog
        (every prune is a dry run), so each test gets the answer the first one got."""
        if args not in self.answers:
            self.answers[args] = self.ws.json(*args)
        return self.answers[args]

    def loaded_optimizer(self, path: str) -> tuple[str, int]:
        """What `load_model(path)` in a fresh child gives: loaded ahead with the other files
        of this framework in one child (`load_ahead`), or now if the path was not foreseen."""
        if path not in self.loaded:
            self.loaded |= loaded_optimizers(self.framework, [path])
        return self.loaded[path]


def new_user_workspace(base: Path) -> Workspace:
    """A root and a catalog, no filename template, no metrics_files: what a new user writes."""
    ws = Workspace(base)
    ws.config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {ws.root}\n"
        "completion:\n  settle_seconds: 0\n"
    )
    return ws


def train_all(exps: dict[str, dict[str, Path]], truths: dict[str, Path], phase: str) -> None:
    """Each framework's job in its own child, both at once; one `fit()` writes both layouts."""
    procs = {}
    for framework, by_layout in exps.items():
        argv = [sys.executable, str(SCRIPT), framework, str(truths[framework]), phase]
        argv += [f"{layout}={exp}" for layout, exp in by_layout.items()]
        procs[framework] = forked_python.popen(
            argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    expected = SIGKILL if phase == "first" else 0
    try:
        for framework, proc in procs.items():
            out, err = proc.communicate(timeout=TRAIN_TIMEOUT_S)
            assert proc.returncode == expected, f"{framework} {phase}: " + out + err[-4000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def load_ahead(scenarios: list[Trained]) -> None:
    """The files `latest --resumable` names (and, for Keras 3, the newest it passes over),
    each framework's loaded in one child: what the tests then check against the catalog."""
    wanted: dict[str, list[str]] = {}
    for t in scenarios:
        doc = t.read("latest", "--run", "exp", "--resumable")
        wanted.setdefault(t.framework, []).append(doc["path"])
        wanted[t.framework] += [p["path"] for p in doc.get("passed_over") or []]
    with ThreadPoolExecutor(len(wanted)) as pool:  # the frameworks' children at once
        futures = {f: pool.submit(loaded_optimizers, f, paths) for f, paths in wanted.items()}
        loaded = {framework: future.result() for framework, future in futures.items()}
    for t in scenarios:
        t.loaded = dict(loaded[t.framework])


@pytest.fixture(scope="module")
def all_trained(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Trained]:
    """The four scenarios: per framework one job (killed, then resumed) writing the nested and
    the flat experiment, each in its own new user's root and catalog, scanned after the kill and
    after the resume."""
    workspaces, exps, truths = {}, {}, {}
    for framework, layout in SCENARIOS:
        base = tmp_path_factory.mktemp(f"first-hour-{framework}-{layout}")
        workspaces[framework, layout] = ws = new_user_workspace(base)
        exps.setdefault(framework, {})[layout] = ws.root / "exp"
        # The truth lives outside every root.
        truths[framework] = tmp_path_factory.getbasetemp() / f"first-hour-truth-{framework}"
    train_all(exps, truths, "first")
    before = {}
    for key, ws in workspaces.items():
        ws.run("scan")
        before[key] = [r for r in ws.json("list", "--run", "exp") if r["version_of"] is None]
    train_all(exps, truths, "resume")
    scenarios = {}
    for (framework, layout), ws in workspaces.items():
        ws.run("scan")
        exp = ws.root / "exp"
        truth = {
            int(e): t
            for e, t in json.loads((truths[framework] / "truth.json").read_text())["epochs"].items()
        }
        assert sorted(truth) == list(range(1, EPOCHS + 1))
        assert {truth[e]["phase"] for e in range(KILLED_AFTER + 1, EPOCHS + 1)} == {"resume"}
        # The resumed job rewrote the log from the resumed epoch on: epochs 1-7 are gone from it.
        logged = (exp / "history.csv").read_text().splitlines()[1:]
        assert [int(line.split(",")[0]) + 1 for line in logged] == list(
            range(KILLED_AFTER + 1, EPOCHS + 1)
        )
        scenarios[framework, layout] = Trained(
            framework, layout, ws, exp, truth, before[framework, layout]
        )
    load_ahead(list(scenarios.values()))
    return scenarios


@pytest.fixture(scope="module", params=SCENARIOS, ids=["-".join(s) for s in SCENARIOS])
def trained(request: pytest.FixtureRequest, all_trained: dict[tuple[str, str], Trained]) -> Trained:
    return all_trained[request.param]


def epoch_of_name(path: str) -> int | None:
    found = re.search(r"(?:model-|w-)(\d+)", Path(path).name)
    return int(found.group(1)) if found else None


def loaded_optimizers(framework: str, paths: list[str]) -> dict[str, tuple[str, int]]:
    """{path: (optimizer class, iterations)} of `load_model(path)`, each path loaded in turn in
    one child (a new process, as a resuming job is; no fit or save runs in it)."""
    code = (
        "import json,os,sys\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL']='3'\n"
        "if sys.argv[1]=='tfkeras':\n"
        "    os.environ['TF_USE_LEGACY_KERAS']='1'; import tf_keras as k\n"
        "else:\n    import keras as k\n"
        "out={}\n"
        "for path in sys.argv[2:]:\n"
        "    m=k.models.load_model(path)\n"
        "    out[path]=[type(m.optimizer).__name__, int(m.optimizer.iterations.numpy())]\n"
        "print(json.dumps(out))\n"
    )
    done = forked_python.run(
        [sys.executable, "-c", code, framework, *paths],
        env=child_env(),
        text=True,
        timeout=TRAIN_TIMEOUT_S,
        check=True,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    return {path: (name, int(iterations)) for path, (name, iterations) in found.items()}


# ---- 1. latest --resumable ---------------------------------------------------------------------


def test_latest_resumable_names_a_file_that_really_resumes(trained: Trained) -> None:
    ws = trained.ws
    doc = trained.read("latest", "--run", "exp", "--resumable")
    assert doc["resumable"] is True
    assert ws.run("latest", "--run", "exp", "--resumable").stdout.strip() == doc["path"]
    shown = ws.json("show", doc["path"])
    name, iterations = trained.loaded_optimizer(doc["path"])
    assert (name, iterations) == ("Adam", shown["iterations"]) and iterations > 0, doc
    if trained.framework == "keras3":
        # Epoch 8's .keras was the resumed process's first save (before any best.h5): it keeps
        # its optimizer config; 9 and 10 lost it, and --json says why they were passed over.
        assert epoch_of_name(doc["path"]) == KILLED_AFTER + 1 and doc["path"].endswith(".keras")
        passed = {epoch_of_name(p["path"]): p["reason"] for p in doc["passed_over"]}
        assert sorted(passed) == [KILLED_AFTER + 2, EPOCHS], doc["passed_over"]
        assert all("RMSprop at iteration 0" in reason for reason in passed.values())
        newest = next(p["path"] for p in doc["passed_over"] if epoch_of_name(p["path"]) == EPOCHS)
        assert trained.loaded_optimizer(newest)[0] != "Adam"  # what it would have resumed with
        # One rule everywhere: the card of the passed-over file says no, as its note does.
        card = ws.run("describe", newest).stdout
        assert re.search(r"\| resumable \| no - unreliable", card), card
        assert "resume: unreliable" in card


# ---- 2. a log above two checkpoint folders ------------------------------------------------------


def test_the_log_above_the_checkpoint_folders_is_theirs(trained: Trained) -> None:
    ws, truth = trained.ws, trained.truth
    by_path = {r["path"]: r for r in trained.rows()}
    numbered = [r for r in by_path.values() if epoch_of_name(r["path"]) is not None]
    assert len(numbered) == 2 * EPOCHS
    for row in numbered:
        epoch = epoch_of_name(row["path"])
        assert row["epoch"] == epoch, row
        expected = truth[epoch]["logs"]["val_loss"]
        assert row["metrics"].get("val_loss") == pytest.approx(expected, rel=1e-6), row["path"]
    best_epoch = min(truth, key=lambda e: truth[e]["logs"]["val_loss"])
    for run in trained.numbered_runs:
        found = ws.run("best", "--run", run, "--metric", "val_loss").stdout.strip()
        if trained.layout == "nested":
            assert epoch_of_name(found) == best_epoch, (run, found)
        history = trained.read("history", "--run", run)
        values = {e["epoch"]: e["values"].get("val_loss") for e in history["epochs"]}
        assert sorted(values) == list(range(1, EPOCHS + 1)), history
        for epoch, value in values.items():
            assert value == pytest.approx(truth[epoch]["logs"]["val_loss"], rel=1e-6), epoch
        plan = ws.json(
            "prune", "--run", run, "--keep-best", "1", "--metric", "val_loss", "--dry-run"
        )
        kept = {
            by_path[d["path"]]["epoch"]
            for rp in plan["runs"]
            if rp["run"] == run
            for d in rp["decisions"]
            if any(r.startswith("best val_loss #1") for r in d["reasons"])
        }
        assert kept == {best_epoch}, plan


# ---- 3. metrics recorded before the resume ------------------------------------------------------


def test_metrics_recorded_before_the_resume_survive_the_rewritten_log(trained: Trained) -> None:
    truth = trained.truth
    recorded = {
        r["path"]: r["metrics"]
        for r in trained.before_resume
        if epoch_of_name(r["path"]) is not None
    }
    assert len(recorded) == 2 * KILLED_AFTER
    assert all("val_loss" in m for m in recorded.values()), recorded  # as the kill left them
    now = {r["path"]: r for r in trained.rows()}
    for path, before in recorded.items():
        epoch = epoch_of_name(path)
        assert now[path]["metrics"] == before, path  # nothing lost, nothing changed
        assert before["val_loss"] == pytest.approx(truth[epoch]["logs"]["val_loss"], rel=1e-6)
    for run in trained.numbered_runs:
        history = trained.read("history", "--run", run)
        early = {e["epoch"]: e["values"] for e in history["epochs"] if e["epoch"] <= KILLED_AFTER}
        assert sorted(early) == list(range(1, KILLED_AFTER + 1))
        assert all("val_loss" in v for v in early.values()), early
    best_epoch = min(truth, key=lambda e: truth[e]["logs"]["val_loss"])
    found = trained.ws.json("best", "--run", trained.numbered_runs[0], "--metric", "val_loss")
    assert found["metrics"]["val_loss"] == pytest.approx(
        truth[best_epoch]["logs"]["val_loss"], rel=1e-6
    )


# ---- 4. retention counts epochs ----------------------------------------------------------------


def test_keep_last_keeps_the_last_epochs_with_every_file_of_each(trained: Trained) -> None:
    plan = trained.ws.json("prune", "--run", "exp", "--keep-last", "3", "--dry-run")
    decisions = [
        d for rp in plan["runs"] for d in rp["decisions"] if "/.ckpt-versions/" not in d["path"]
    ]
    rows = {r["path"]: r for r in trained.rows()}
    kept = {d["path"] for d in decisions if d["action"] == "keep"}
    last = set(range(EPOCHS - 2, EPOCHS + 1))
    assert kept == {p for p, r in rows.items() if r["epoch"] in last}, plan
    assert {rows[p]["epoch"] for p in kept} == last
    if trained.layout == "flat":  # one run: model-010, w-10 and best.h5 are one moment
        best = next(d for d in decisions if d["path"].endswith("best.h5"))
        assert f"last #1 (epoch {EPOCHS}: 3 files)" in best["reasons"], best
        eight = [d for d in decisions if epoch_of_name(d["path"]) == EPOCHS - 2]
        assert [d["reasons"] for d in eight] == [[f"last #3 (epoch {EPOCHS - 2}: 2 files)"]] * 2
