"""Issue 43: declared stages run on each complete checkpoint of a live run, their results
become catalog metrics, and a misbehaving stage never stops the others.

A real plain PyTorch loop trains under a live `ckpt serve` whose `pipeline:` has an `eval`
stage: a real script that loads each checkpoint with torch in its own process and computes a
held-out loss. Every complete epoch file gets exactly one result, in `ckpt jobs`, `list`,
`best --metric eval:heldout_loss`; a stage that hangs is killed at its time limit, one that
floods its output costs the daemon no memory, one that exits non-zero is retried then failed
with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_a_live_pytorch_run_gets_each_checkpoint_evaluated_once(tmp_path: Path) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    evaluated = tmp_path / "evaluated.log"
    eval_argv = pipeline_stages.argv(scripts["eval"], "{path}", str(evaluated))
    ws = service_workspace(
        tmp_path,
        "pipeline:\n" + stage_yaml("eval", eval_argv, runs="exp*", timeout="2m", concurrency=2),
    )
    run = ws.root / "exp1"
    run.mkdir()
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    epochs = 3
    subprocess.run(pipeline_stages.argv(scripts["train"], str(run), str(epochs), "0.3"), check=True)
    epoch_files = {str(run / f"ckpt_epoch{e:03d}.pt") for e in range(epochs)}

    def epoch_files_done() -> bool:
        done = {j["path"] for j in jobs(ws) if j["state"] == "done"}
        return epoch_files <= done

    daemon.wait_until(epoch_files_done, timeout=120, what="every epoch file evaluated")
    found = jobs(ws)
    daemon.stop()
    # Exactly one result per checkpoint generation and stage; none failed.
    for path in epoch_files:
        mine = [j for j in found if j["path"] == path]
        assert [j["state"] for j in mine] == ["done"], mine
        assert mine[0]["attempts"] == 1 and mine[0]["stage"] == "eval"
    assert not [j for j in found if j["state"] == "failed"], found
    # The stage's numbers are the checkpoint's metrics, under the stage's name.
    listed = {c["path"]: c for c in ws.json("list", "--run", "exp1")}
    losses = {}
    for job in found:
        if job["state"] == "done" and job["path"] in epoch_files:
            value = job["result"]["metrics"]["eval:heldout_loss"]
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
    assert (
        losses[best] == min(value for path, value in losses.items() if path in epoch_files)
        or best not in epoch_files
    )
    shown = ws.run("show", str(run / "ckpt_epoch000.pt")).stdout
    assert "eval:heldout_loss" in shown and "stage:eval" in shown


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
