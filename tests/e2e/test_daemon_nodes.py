"""Issue 13 item 2, on SQLite: several daemons on one catalog, one per node. A second daemon of
a node whose daemon runs is refused at start (exit 2, the reason named); daemons of other nodes
run side by side, and `ckpt status --json` lists each node, running or not (a SIGKILLed one is
"not running" with the reason)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import Daemon, Workspace

pytestmark = pytest.mark.slow


def node_workspace(base: Path, catalog: Path, node: str) -> Workspace:
    ws = Workspace(base / node)
    ws.config.write_text(
        f"database: sqlite:///{catalog}\nstate_dir: {base / node / 'state'}\n"
        f"roots:\n  - path: {ws.root}\n"
        f"service:\n  heartbeat: 1s\n  node: {node}\nschedule:\n  rescan: 0\n"
    )
    return ws


def status(ws: Workspace) -> dict:
    return json.loads(ws.run("status", "--json").stdout)


def test_one_daemon_per_node_and_status_lists_every_node(tmp_path: Path) -> None:
    catalog = tmp_path / "shared.db"
    a, b, c = (node_workspace(tmp_path, catalog, n) for n in ("node-a", "node-b", "node-c"))
    first = Daemon(a)
    first.wait_for_log("event=ready")
    twin = subprocess.run(  # same node, same catalog: refused before it acts
        [sys.executable, "-m", "ckpt_daemon", "--config", str(a.config), "serve"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert twin.returncode == 2, twin.stderr
    assert "node 'node-a' is running on this catalog" in twin.stderr
    assert twin.stderr.count("\n") <= 2  # one clear line (plus the log line, if any)
    others = [Daemon(b), Daemon(c)]
    for d in others:
        d.wait_for_log("event=ready")
    doc = status(a)
    assert doc["running"] is True
    nodes = {d["node"]: d for d in doc["daemons"]}
    assert set(nodes) == {"node-a", "node-b", "node-c"}
    assert all(d["running"] for d in nodes.values())
    assert nodes["node-b"]["pid"] == others[0].proc.pid

    others[1].signal(signal.SIGKILL)
    others[1].wait()
    nodes = {d["node"]: d for d in status(b)["daemons"]}
    assert [n for n, d in sorted(nodes.items()) if d["running"]] == ["node-a", "node-b"]
    assert "not running" in nodes["node-c"]["reason"] or "killed" in nodes["node-c"]["reason"]
    text = b.run("status").stdout
    assert "daemons (2 of 3 running):" in text and "node-c: pid" in text

    restarted = Daemon(c)  # its old daemon is dead: the node may start again
    restarted.wait_for_log("event=ready")
    assert all(d["running"] for d in status(c)["daemons"])
    for d in (first, others[0], restarted):
        assert d.stop() == 0
