"""Issue 43 item 4: the disk guard, when it must free a checkpoint a pipeline stage still waits
on, says which pending evaluations it gave up. On a real 4 MB tmpfs (a private mount namespace:
support/guard_gave_up.py) under `ckpt serve`, with two real Hugging Face Trainer runs and an
`eval` stage that stays pending (it asks for a `gpu` label this host lacks): the guard frees the
checkpoint no stage waits on first, then the one whose eval is pending, cancels that job with
a reason naming the guard, and its log line, `ckpt status` (text and JSON), the audit log and
the web view's disk page name the stage given up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import guard_gave_up

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, hf_runs: Path) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("needs root and unshare(1) for a private mount namespace with a tmpfs")
    out = tmp_path_factory.mktemp("guard-gave-up")
    driver = [sys.executable, guard_gave_up.__file__, "--driver", str(out / "bed"), str(hf_runs)]
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", *driver],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )
    found = out / "bed" / "results.json"
    assert found.exists(), done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(found.read_text())
    return doc


def test_the_guard_gives_up_a_pending_evaluation_last_and_says_so(results) -> None:
    assert results["exit"] == 0, results["serve_log"]
    root = str(Path(results["jobs"][0]["path"]).parents[1])
    a_old, a_new = f"{root}/a/checkpoint-4", f"{root}/a/checkpoint-6"
    # It freed the checkpoint no stage waits on first, though a's is older.
    freed = [e["path"] for e in results["log"] if e["action"] == "trash"]
    assert freed == [f"{root}/b/checkpoint-2", a_old], freed
    jobs = {j["path"]: j for j in results["jobs"]}
    assert jobs[a_new]["state"] == "pending"  # the newest: never freed, its eval still to run
    given_up = jobs[a_old]
    assert given_up["state"] == "cancelled" and given_up["attempts"] == 0
    assert given_up["error"].startswith("given up by the disk guard (")
    assert given_up["error"].endswith("; gives up its pending stage eval")
    # Said in the audit log's reason for the act, the service's log, and `ckpt status`.
    trashed = next(e for e in results["log"] if e["action"] == "trash" and e["path"] == a_old)
    assert trashed["reason"].endswith("gives up its pending stage eval")
    assert f"event=disk_guard_gave_up path={a_old} run=a" in results["serve_log"]
    assert "stages=eval" in results["serve_log"]
    assert f'gave_up="eval on {a_old}"' in results["serve_log"]
    (disk,) = results["status"]["disk"]
    assert disk["gave_up"] == [
        {"path": a_old, "run": "a", "action": disk["gave_up"][0]["action"], "stages": ["eval"]}
    ]
    assert disk["gave_up"][0]["action"] in ("demote", "trash", "tier")
    assert f"gave up stage(s) eval of {a_old}" in results["status_text"]
    assert f'Gave up stage eval of <bdi class="path">{a_old}</bdi>' in results["disk_page"]
    assert results["free_at_end"] >= guard_gave_up.MIN_FREE
