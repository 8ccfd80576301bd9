"""Issue 43: two daemons on one PostgreSQL catalog share the pipeline's queue. Each job runs
once (a probe stage logs every start; none starts twice, none overlaps another copy of
itself), and `runs_on` is honoured: the stage that asks for a `gpu` label runs only on the
daemon whose `service.labels` has it, the other stage on both."""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench"
CHECKPOINTS = 8


def node(base: Path, url: str, name: str, root: Path, stages: str, labels: str) -> Workspace:
    ws = Workspace(base / name)
    ws.config.write_text(
        f"database: {url}\nstate_dir: {base / name / 'state'}\n"
        f"roots:\n  - path: {root}\n"
        "completion:\n  settle_seconds: 0.5\n  min_age_seconds: 0.1\n"
        f"service:\n  heartbeat: 1s\n  node: {name}\n  labels: {labels}\n"
        "schedule:\n  rescan: 2s\n"
        f"pipeline:\n{stages}"
    )
    return ws


def test_two_daemons_on_postgresql_share_the_queue_and_honour_runs_on(
    tmp_path: Path, postgres: Any
) -> None:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    kills = importlib.import_module("pipeline_kills")  # its probe stage and checkpoint writer
    probe = tmp_path / "probe.py"
    probe.write_text(kills.PROBE)
    logs = {stage: tmp_path / f"{stage}.log" for stage in ("any", "gpu")}
    stages = "".join(
        f"  - name: {stage}\n"
        f"    command: {json.dumps([sys.executable, str(probe), '{id}', str(logs[stage])])}\n"
        "    concurrency: 2\n" + ("    runs_on: [gpu]\n" if stage == "gpu" else "")
        for stage in ("any", "gpu")
    )
    url = postgres.fresh_url()
    root = tmp_path / "share"
    kills.write_checkpoints(root / "exp", CHECKPOINTS)
    nodes = {
        "cpu-host": node(tmp_path, url, "cpu-host", root, stages, "[]"),
        "gpu-host": node(tmp_path, url, "gpu-host", root, stages, "[gpu]"),
    }
    daemons = {name: Daemon(ws) for name, ws in nodes.items()}
    try:
        ws = nodes["cpu-host"]

        def all_done() -> bool:
            found = ws.json("jobs")
            return len(found) == 2 * CHECKPOINTS and all(j["state"] == "done" for j in found)

        daemons["cpu-host"].wait_until(all_done, timeout=180, what="every job done")
        found = ws.json("jobs")
        pids = {name: d.proc.pid for name, d in daemons.items()}
    finally:
        for d in daemons.values():
            d.stop()
        postgres.drop(url)
    holders = {j["id"]: (j["stage"], int(j["holder"].rsplit(":", 1)[1])) for j in found}
    # runs_on: every gpu job on the gpu host's daemon.
    assert {pid for stage, pid in holders.values() if stage == "gpu"} == {pids["gpu-host"]}
    # Each job ran once: one start per checkpoint in each stage's log, no overlap, one try.
    for stage, log in logs.items():
        lines = log.read_text().splitlines()
        assert not [line for line in lines if line.startswith("OVERLAP")], lines
        starts = Counter(line.split()[1] for line in lines if line.startswith("start "))
        assert len(starts) == CHECKPOINTS and set(starts.values()) == {1}, (stage, starts)
    assert all(j["attempts"] == 1 for j in found), found
