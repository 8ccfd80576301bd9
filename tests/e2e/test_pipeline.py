"""Issue 43: declared stages run on each complete checkpoint of a live run, their results
become catalog metrics, and a misbehaving stage never stops the others.

Real trainers (a plain PyTorch loop, a Hugging Face Trainer run) train under a live `ckpt
serve` whose `pipeline:` has an `eval` stage, a real script that loads each checkpoint with
torch in its own process and computes a held-out loss, and the built-in `integrity` stage.
Every complete checkpoint gets exactly one result per stage, in `ckpt jobs`, `list`, `best
--metric eval:heldout_loss`; the save each trainer wrote with a NaN in its weights is marked
by integrity and passed over, with the reason, by `latest --resumable`, `best` and `wait`. A
stage that hangs is killed at its time limit, one that floods its output costs the daemon no
memory, one that exits non-zero is retried then failed with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import pipeline_stages
from tests.support.daemon import Daemon, service_workspace

pytestmark = pytest.mark.slow


def stage_yaml(name: str, command: list[str], **extra: object) -> str:
    lines = [f"  - name: {name}", f"    command: {json.dumps(command)}"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def jobs(ws: object) -> list[dict]:
    return ws.json("jobs")  # type: ignore[attr-defined,no-any-return]


INTEGRITY = "  - name: integrity\n    uses: integrity\n"


def settled(ws: object, paths: set[str], stages: tuple[str, ...]) -> bool:
    """Every path done by every stage, no job open, and every listed checkpoint (each file's
    current generation) with its integrity verdict."""
    found = jobs(ws)
    done = {(j["path"], j["stage"]) for j in found if j["state"] == "done"}
    if not all((p, s) in done for p in paths for s in stages):
        return False
    if any(j["state"] in ("pending", "running") for j in found):
        return False
    rows = ws.json("list")  # type: ignore[attr-defined]
    return all("integrity:scanned" in r["metrics"] for r in rows if r["status"] == "ok")


def test_a_live_pytorch_run_gets_each_checkpoint_evaluated_once(tmp_path: Path) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    evaluated = tmp_path / "evaluated.log"
    eval_argv = pipeline_stages.argv(scripts["eval"], "{path}", str(evaluated))
    ws = service_workspace(
        tmp_path,
        "pipeline:\n"
        + stage_yaml("eval", eval_argv, runs="exp*", timeout="2m", concurrency=2)
        + INTEGRITY,
    )
    run = ws.root / "exp1"
    run.mkdir()
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    epochs = 3
    # The last epoch diverged: its saves (the epoch file, last.pt, best.pt) hold a NaN weight.
    train = pipeline_stages.argv(scripts["train"], str(run), str(epochs), "0.3", "2")
    subprocess.run(train, check=True)
    epoch_files = {str(run / f"ckpt_epoch{e:03d}.pt") for e in range(epochs)}
    daemon.wait_until(
        lambda: settled(ws, epoch_files, ("eval", "integrity")),
        timeout=120,
        what="every checkpoint evaluated and scanned",
    )
    found = jobs(ws)
    daemon.stop()
    # Exactly one result per checkpoint generation and stage; none failed.
    for path in epoch_files:
        mine = [j for j in found if j["path"] == path]
        assert sorted(j["stage"] for j in mine) == ["eval", "integrity"], mine
        assert all(j["state"] == "done" and j["attempts"] == 1 for j in mine), mine
    assert not [j for j in found if j["state"] == "failed"], found
    _the_nan_epoch_is_marked_and_passed_over(ws, run)
    # The stage's numbers are the checkpoint's metrics, under the stage's name.
    listed = {c["path"]: c for c in ws.json("list", "--run", "exp1")}
    losses = {}
    for job in found:
        if job["state"] == "done" and job["path"] in epoch_files and job["stage"] == "eval":
            value = job["result"]["metrics"]["eval:heldout_loss"]
            if value is None:  # the NaN epoch's loss: recorded as no value
                continue
            assert listed[job["path"]]["metrics"]["eval:heldout_loss"] == pytest.approx(value)
            losses[job["path"]] = value
    # What the eval script itself computed and logged, per checkpoint, is what was recorded.
    logged = {}
    for line in evaluated.read_text().splitlines():
        _id, path, loss = line.split(" ")
        logged.setdefault(path, []).append(float(loss))
    for path, value in losses.items():
        assert logged[path][-1] == pytest.approx(value)
    best = ws.run("best", "--metric", "eval:heldout_loss", "--run", "exp1").stdout.strip()
    assert best not in epoch_files or losses[best] == min(losses.values())
    shown = ws.run("show", str(run / "ckpt_epoch000.pt")).stdout
    assert "eval:heldout_loss" in shown and "stage:eval" in shown
    assert "health finite (8 tensors)" in shown, shown  # the model's 2, Adam's 6


def _the_nan_epoch_is_marked_and_passed_over(ws: Any, run: Path) -> None:
    listed = {Path(c["path"]).name: c["metrics"] for c in ws.json("list", "--run", "exp1")}
    sick = {name for name, m in listed.items() if m.get("integrity:nonfinite_tensors")}
    assert sick == {"ckpt_epoch002.pt", "last.pt", "best.pt"}, listed
    assert listed["ckpt_epoch002.pt"]["integrity:nan"] == 1
    assert listed["ckpt_epoch002.pt"].get("eval:heldout_loss") is None  # NaN: no value
    latest = ws.run("latest", "--run", "exp1", "--resumable")
    assert latest.stdout.strip() == str(run / "ckpt_epoch001.pt"), latest
    assert "integrity found non-finite weights: 1 tensor (1 NaN, 0 Inf)" in latest.stderr
    doc = ws.json("latest", "--run", "exp1", "--resumable")
    assert {Path(p["path"]).name for p in doc["passed_over"]} == sick
    shown = ws.run("show", str(run / "ckpt_epoch002.pt")).stdout
    assert "health NON-FINITE: 1 tensor (1 NaN, 0 Inf)" in shown, shown
    scan = ws.json("integrity", str(run / "last.pt"))  # by hand: the stage's own answer
    assert scan["flagged"][0] == {
        "name": "model.weight", "dtype": "float32", "elements": 8, "found": "1 NaN"
    }  # fmt: skip


def test_a_live_hf_trainer_run_is_evaluated_scanned_and_its_nan_save_passed_over(
    tmp_path: Path,
) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    eval_argv = pipeline_stages.argv(scripts["eval"], "{path}")
    ws = service_workspace(
        tmp_path,
        "pipeline:\n" + stage_yaml("eval", eval_argv, timeout="2m", concurrency=2) + INTEGRITY,
    )
    run = ws.root / "hf1"
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    daemon = Daemon(ws, env=env)  # its stage children get the daemon's environment
    daemon.wait_for_log("event=ready")
    # An evaluator's loop, waiting before the run starts: it must get a checkpoint only once
    # integrity has judged it (and never the NaN one).
    waiter = subprocess.Popen(
        [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "wait", "--run", "hf1",
         "--newer-than", "0", "--timeout", "3m", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ws.base,
    )  # fmt: skip
    subprocess.run(
        pipeline_stages.argv(scripts["hf_train"], str(run), "4"),
        check=True, env={**os.environ, **env}, capture_output=True,
    )  # fmt: skip
    sick, fine = str(run / "out/checkpoint-4"), str(run / "out/checkpoint-2")
    out, err = waiter.communicate(timeout=200)
    assert waiter.returncode == 0, err
    first = json.loads(out)
    assert first["path"] == fine and first["metrics"]["integrity:scanned"] == 1, first
    daemon.wait_until(
        lambda: settled(ws, {sick, fine}, ("eval", "integrity")),
        timeout=150,
        what="every Trainer checkpoint evaluated and scanned",
    )
    found = jobs(ws)
    daemon.stop()
    for path in (fine, sick):
        mine = [j for j in found if j["path"] == path]
        assert sorted(j["stage"] for j in mine) == ["eval", "integrity"], mine
        assert all(j["state"] == "done" and j["attempts"] == 1 for j in mine), mine
    listed = {c["path"]: c["metrics"] for c in ws.json("list", "--run", "hf1")}
    assert [p for p in (fine, sick) if listed[p]["integrity:nonfinite_tensors"]] == [sick]
    assert listed[sick]["integrity:nan"] == 64  # 4 rows of 16 position embeddings
    # The NaN rows are ones the inputs never reach: its held-out loss is finite, and the best.
    assert listed[sick]["eval:heldout_loss"] < listed[fine]["eval:heldout_loss"], listed
    best = ws.run("best", "--metric", "eval:heldout_loss", "--run", "hf1")
    assert best.stdout.strip() == fine, best
    assert f"passed over {sick}: integrity found non-finite weights" in best.stderr
    passed = ws.json("best", "--metric", "eval:heldout_loss", "--run", "hf1")["passed_over"]
    assert [p["path"] for p in passed] == [sick]
    latest = ws.run("latest", "--run", "hf1", "--resumable")
    assert latest.stdout.strip() == fine and "passed over" in latest.stderr, latest
    waited = ws.json("wait", "--run", "hf1", "--newer-than", "0")
    assert waited["path"] == fine and [p["path"] for p in waited["passed_over"]] == [sick]
    nothing = ws.run("wait", "--run", "hf1", "--after", fine, "--timeout", "1s", check=False)
    assert nothing.returncode == 6
    assert f"passed over {sick}: integrity found non-finite weights" in nothing.stderr


def test_a_hanging_flooding_or_failing_stage_never_stops_the_others(tmp_path: Path) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    stages = (
        stage_yaml("hang", pipeline_stages.argv(scripts["hang"]), timeout="2s")
        + stage_yaml("flood", pipeline_stages.argv(scripts["flood"]), timeout="2m")
        + stage_yaml("fail", pipeline_stages.argv(scripts["fail"]), retries=1)
        + stage_yaml("eval", pipeline_stages.argv(scripts["eval"], "{path}"), timeout="2m")
    )
    ws = service_workspace(tmp_path, "pipeline:\n" + stages)
    run = ws.root / "exp1"
    run.mkdir()
    subprocess.run(pipeline_stages.argv(scripts["train"], str(run), "1", "0"), check=True)
    (run / "last.pt").unlink()
    (run / "best.pt").unlink()
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")

    def settled() -> bool:
        found = jobs(ws)
        return len(found) == 4 and all(j["state"] in ("done", "failed") for j in found)

    daemon.wait_until(settled, timeout=120, what="all four stages ended")
    peak_kb = _peak_rss_kb(daemon.proc.pid)
    daemon.stop()
    by_stage = {j["stage"]: j for j in ws.json("jobs")}
    assert by_stage["hang"]["state"] == "failed"
    assert by_stage["hang"]["error"] == "timed out after 2 s"
    assert by_stage["flood"]["state"] == "done"
    assert by_stage["flood"]["result"]["metrics"] == {"flood:lines": 800}
    assert by_stage["fail"]["state"] == "failed" and by_stage["fail"]["attempts"] == 2
    assert by_stage["fail"]["error"] == "exit 3: no GPU here"
    assert by_stage["eval"]["state"] == "done"
    # ~50 MB went through the flood's pipe; the daemon kept only its tail.
    assert peak_kb < 400_000, f"the daemon's peak RSS was {peak_kb} kB"
    detailed = ws.run("jobs", "--state", "failed").stdout
    assert "timed out after 2 s" in detailed and "exit 3: no GPU here" in detailed


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_stage_run_by_hand_is_recorded_as_the_service_records_it(tmp_path: Path) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    ws = service_workspace(
        tmp_path,
        "pipeline:\n"
        + stage_yaml("eval", pipeline_stages.argv(scripts["eval"], "{path}"))
        + stage_yaml("fail", pipeline_stages.argv(scripts["fail"])),
    )
    run = ws.root / "exp1"
    run.mkdir()
    subprocess.run(pipeline_stages.argv(scripts["train"], str(run), "1", "0"), check=True)
    ws.run("scan")
    target = str(run / "ckpt_epoch000.pt")
    job = ws.json("stage", "run", "eval", target)
    assert job["state"] == "done" and job["path"] == target
    assert "evaluated" in job["output"]
    assert ws.json("show", target)["metrics"]["eval:heldout_loss"] == pytest.approx(
        job["result"]["metrics"]["eval:heldout_loss"]
    )
    failed = ws.run("stage", "run", "fail", target, check=False)
    assert failed.returncode == 3, failed.stderr
    assert "exit 3: no GPU here" in failed.stdout + failed.stderr
    unknown = ws.run("stage", "run", "nope", target, check=False)
    assert unknown.returncode == 2 and "no stage 'nope'" in unknown.stderr
    assert "eval, fail" in unknown.stderr
    (fail_job,) = [j for j in ws.json("jobs") if j["stage"] == "fail"]
    again = ws.run("jobs", "retry", str(fail_job["id"]))
    assert "pending" in again.stdout
    cancelled = ws.run("jobs", "cancel", str(fail_job["id"]))
    assert "cancelled" in cancelled.stdout
    bad = ws.run("jobs", "--state", "nope", check=False)
    assert bad.returncode == 2
    assert sys.executable  # the scripts ran with this interpreter
