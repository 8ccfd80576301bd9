"""Issue 43: a run's final checkpoint, and the pipeline seen in the web view and Prometheus.

A real plain PyTorch loop trains under a live `ckpt serve` (web view and /metrics on) whose
`pipeline:` has a stage on every complete checkpoint (`size`: its bytes as a metric, an artifact,
a note), a stage `on: {final: 2s}` (`last`) and a failing one on the final checkpoint too
(`broken`: exit 3 after printing). Exactly one checkpoint gets the final jobs, the run's last
written, once the loop has ended (quiet, no writer), every other one is skipped saying why; a
real headless Chromium shows each stage of that checkpoint on its page (state, tries, duration,
metrics, artifacts, note, the failed one's error and output tail) and the run's table a stages
column, drawn again in place when a job ends; /metrics has the stages' durations and failures."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support import pipeline_stages
from tests.support.browser import chromium
from tests.support.daemon import Daemon, service_workspace

pytestmark = pytest.mark.slow

SIZE = [
    "/bin/sh",
    "-c",
    'printf \'{"metrics": {"bytes": %s}, "artifacts": ["file://%s"], "note": "sized"}\\n\' '
    '"$(stat -c %s "$1")" "$1"',
    "sh",
    "{path}",
]
BROKEN = ["/bin/sh", "-c", "echo loading the model >&2; echo 'CUDA out of memory' >&2; exit 3"]


def stage(name: str, command: list[str], on: str) -> str:
    return f"  - name: {name}\n    on: {on}\n    command: {json.dumps(command)}\n"


def test_the_final_checkpoint_s_stages_in_the_web_view_and_metrics(tmp_path: Path) -> None:
    scripts = pipeline_stages.write(tmp_path / "scripts")
    ws = service_workspace(
        tmp_path,
        "pipeline:\n"
        + stage("size", SIZE, "complete")
        + stage("last", ["/bin/true"], "{final: 2s}")
        + stage("broken", BROKEN, "{final: 2s}"),
    )
    listen = "service:\n  heartbeat: 1s\n  web_listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.1:0\n"
    ws.config.write_text(ws.config.read_text().replace("service:\n  heartbeat: 1s\n", listen, 1))
    run = ws.root / "exp1"
    run.mkdir()
    daemon = Daemon(ws)
    try:
        daemon.wait_for_log("event=ready")
        web = re.search(r"web_listening address=127\.0\.0\.1:(\d+)", daemon.log)
        metrics = re.search(r"metrics_listening address=127\.0\.0\.1:(\d+)", daemon.log)
        assert web and metrics, daemon.log
        train = pipeline_stages.argv(scripts["train"], str(run), "3", "0.2")
        subprocess.run(train, check=True)
        stamps = {str(f): f.stat().st_mtime_ns for f in run.glob("*.pt")}
        # The files of the last training moment (saved within one tick of the filesystem's
        # clock: the same mtime): the final checkpoint is one of them.
        newest = {path for path, ns in stamps.items() if ns == max(stamps.values())}

        with chromium() as browser:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{web[1]}/run?run=exp1")
            ended = "event=stage_ended stage=broken"
            daemon.wait_until(lambda: ended in daemon.log, timeout=90, what="the final stages")
            jobs = ws.json("jobs", "--state", "skipped") + ws.json("jobs")
            last = [j for j in jobs if j["stage"] == "last"]
            # One final job per stage: on the run's last written checkpoint; the others
            # (every generation of each) skipped, saying why.
            (done,) = [j for j in last if j["state"] == "done"]
            assert done["path"] in newest, (done, stamps)
            final = done["path"]
            skipped = [j for j in last if j["state"] == "skipped"]
            assert {j["path"] for j in skipped} | {final} == set(stamps)
            assert all("not its run's final checkpoint" in j["error"] for j in skipped), skipped
            (broken_job,) = [j for j in jobs if j["stage"] == "broken" and j["state"] != "skipped"]
            assert broken_job["path"] == final and broken_job["state"] == "failed"
            # The run page, open since before the final jobs ended, drew them in place.
            row = page.locator(f"tr.checkpoint[data-id='{done['checkpoint_id']}']")
            row.locator("td.stages .stage-failed").wait_for(timeout=15_000)
            assert "last done" in row.locator("td.stages").inner_text()
            assert "broken failed" in row.locator("td.stages").inner_text()
            # The checkpoint's page: each stage, its state, tries, duration and results.
            page.goto(f"http://127.0.0.1:{web[1]}/checkpoint?id={done['checkpoint_id']}")
            current = page.locator("#stages tr.stage:not(.earlier)").all()  # its present bytes'
            rows = {tr.get_attribute("data-stage"): tr for tr in current}
            assert len(rows) == len(current)
            assert set(rows) == {"size", "last", "broken"}
            size = rows["size"]
            assert size.get_attribute("data-state") == "done"
            size_bytes = Path(final).stat().st_size
            assert size.locator("td.metrics").inner_text() == f"size:bytes {size_bytes}"
            assert size.locator("td.artifacts").inner_text() == f"file://{final}"
            assert size.locator("td.why").inner_text() == "sized"
            assert re.fullmatch(r"\d+\.\d s", size.locator("td.duration").inner_text())
            broken = rows["broken"]
            assert broken.get_attribute("data-state") == "failed"
            assert broken.locator("td.num").first.inner_text() == "1"  # tries
            assert broken.locator("td.why").inner_text().startswith("exit 3: CUDA out of memory")
            tail = broken.locator("pre.tail").inner_text()
            assert "loading the model" in tail and "CUDA out of memory" in tail
            page.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics[1]}/metrics", timeout=30) as r:
            text = r.read().decode()
    finally:
        daemon.stop()
    assert 'ckpt_stage_failures_total{stage="broken"} 1.0' in text, text
    assert 'ckpt_stage_failures_total{stage="size"} 0.0' in text
    sized = len([j for j in jobs if j["stage"] == "size" and j["state"] == "done"])
    assert sized >= len(stamps)
    assert f'ckpt_stage_duration_seconds_count{{stage="size"}} {float(sized)}' in text
    assert 'ckpt_stage_duration_seconds_bucket{le="+Inf",stage="last"} 1.0' in text
    assert 'ckpt_stage_jobs{stage="last",state="done"} 1.0' in text
