"""Issue 13, done when: three daemons (three hosts: each in its own UTS and mount namespace,
with its own host name and its own mount point of one shared folder) on one real PostgreSQL
catalog, with a retention policy and artifacts, while a real Keras job writes a checkpoint per
epoch. One daemon is SIGKILLed in the middle of a prune (caught holding its run's lease: frozen
with SIGSTOP, the lease checked still held, then killed). Afterwards every checkpoint has one
row and one `indexed` event, nothing was trashed twice or wrongly, the dead daemon's lease was
taken over by another node once it expired (by the database's clock), `ckpt status --json`
shows two daemons running and one not, and every audit event names its node."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace
from tests.support.training_runs import child_env

pytestmark = pytest.mark.slow
NODES = ("host-a", "host-b", "host-c")
LEASE_TTL = 8.0
KEEP_LAST = 2
TRAINING = Path(__file__).resolve().parents[1] / "support" / "fleet_training.py"


TRASH = ".ckpt-trash"
# Now as the catalog writes times (ISO 8601 UTC, milliseconds): by the database's clock.
NOW = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"


def checkpoint_names(folder: Path) -> list[str]:
    """The job's checkpoints in `folder` (at any depth), not the inference artifacts."""
    return sorted(p.name for p in folder.rglob("ckpt-*.keras") if ".inference." not in p.name)


def needs_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for private mount and UTS namespaces")


def host(base: Path, url: str, node: str) -> tuple[Workspace, Path]:
    """A host's config: its own mount point of the share (bound in its namespace), one catalog."""
    ws = Workspace(base / node)
    mount = base / node / "mnt"
    mount.mkdir()
    ws.config.write_text(
        f"database: {url}\nstate_dir: {base / node / 'state'}\n"
        f"roots:\n  - path: {mount}\n    name: shared\n    observer: polling\n"
        f"    poll_interval: 1s\n    retention: {{keep_last: {KEEP_LAST}}}\n"
        "completion:\n  settle_seconds: 2\n  min_age_seconds: 0.5\n"
        f"service:\n  heartbeat: 1s\n  node: {node}\n  lease_ttl: {LEASE_TTL:g}s\n"
        "schedule:\n  rescan: 5s\n  retention: 1s\n  purge: 0\n  verify: 0\n  artifacts: 2s\n"
        "artifacts:\n  split_after: 0s\n"
    )
    return ws, mount


def on_its_host(node: str, share: Path, mount: Path) -> list[str]:
    script = f'hostname {node} && mount --bind {share} {mount} && exec "$@"'
    return ["unshare", "-m", "-u", "--propagation", "private", "sh", "-c", script, "sh"]


class Catalog:
    """The test's own eyes on the catalog (psycopg, autocommit: each query sees the newest)."""

    def __init__(self, url: str) -> None:
        import psycopg

        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        self.conn = psycopg.connect(conninfo, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str) -> list[Any]:
        return self.conn.execute(sql.encode()).fetchall()

    def held_lease(self, pid: int) -> tuple[int, int, str] | None:
        """(run_id, token, expires_at) of an unexpired lease held by process `pid` itself: the
        daemon's retention job (its artifacts are made by child processes of their own pid)."""
        found = self.rows(
            f"SELECT run_id, token, expires_at FROM leases WHERE pid = {int(pid)}"
            f" AND expires_at > {NOW}"
        )
        return (found[0][0], found[0][1], found[0][2]) if found else None


def kill_mid_prune(daemons: dict[str, Daemon], catalog: Catalog, deadline: float) -> dict:
    """Watch the leases; SIGSTOP the first daemon seen holding one, SIGKILL it if it still
    holds it (else let it go on). Returns what was killed."""
    while time.monotonic() < deadline:
        for node, d in daemons.items():
            held = catalog.held_lease(d.proc.pid)
            if held is None:
                continue
            d.signal(signal.SIGSTOP)
            if catalog.held_lease(d.proc.pid) == held:
                d.signal(signal.SIGKILL)
                d.wait()  # reaped, its log closed
                return {"node": node, "run_id": held[0], "token": held[1], "expires": held[2]}
            d.signal(signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError("no daemon was seen holding a lease: nothing was pruned")


def test_three_daemons_one_share_one_catalog_and_one_killed_mid_prune(
    tmp_path: Path, postgres: Any, request: pytest.FixtureRequest
) -> None:
    needs_namespaces()
    url = postgres.fresh_url()
    share = tmp_path / "share"
    (share / "job").mkdir(parents=True)
    hosts = {node: host(tmp_path, url, node) for node in NODES}
    daemons = {
        node: Daemon(ws, wrap=on_its_host(node, share, mount))
        for node, (ws, mount) in hosts.items()
    }
    for d in daemons.values():
        d.wait_for_log("event=ready", timeout=120)
    catalog = Catalog(url)
    request.addfinalizer(catalog.close)
    stop = tmp_path / "stop-training"
    job = subprocess.Popen(
        [sys.executable, str(TRAINING), str(share / "job"), str(stop), "0.6"],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        killed = kill_mid_prune(daemons, catalog, time.monotonic() + 240)
        killed_at = time.monotonic()
        victim = killed.pop("node")
        # Another node takes the run over once the dead holder's lease expired.
        taken = []
        while time.monotonic() < killed_at + LEASE_TTL + 60 and not taken:
            taken = catalog.rows(
                f"SELECT node, token, acquired_at FROM leases WHERE run_id = {killed['run_id']}"
                f" AND token > {killed['token']}"
            )
            time.sleep(0.1)
        assert taken, f"the lease of {victim} was never taken over"
        assert taken[0][0] != victim and taken[0][2] >= killed["expires"], (taken, killed)
        stop.write_text("stop\n")
        assert job.wait(timeout=240) == 0, job.stderr.read() if job.stderr else ""
    finally:
        stop.write_text("stop\n")
        if job.poll() is None:
            job.kill()
            job.wait()
        if job.stderr is not None:
            job.stderr.close()

    seen: dict[str, Any] = {}

    def settled() -> bool:
        counts = seen["counts"] = dict(
            catalog.rows(
                "SELECT status, count(*) FROM checkpoints WHERE version_of IS NULL GROUP BY status"
            )
        )
        held = catalog.rows(f"SELECT count(*) FROM leases WHERE expires_at > {NOW}")[0][0]
        files = len(checkpoint_names(share / "job")) + len(checkpoint_names(share / TRASH))
        seen.update(held=held, files=files)
        return counts.get("ok") == KEEP_LAST and sum(counts.values()) == files and not held

    survivor = next(d for n, d in daemons.items() if n != victim)
    try:
        survivor.wait_until(settled, timeout=120, what="every checkpoint indexed, retention done")
    except AssertionError as exc:
        rows = catalog.rows("SELECT id, path, status, reason FROM checkpoints ORDER BY id")
        raise AssertionError(f"{seen}\n{rows}\n{str(exc)[-3000:]}") from None
    kept, in_trash = checkpoint_names(share / "job"), checkpoint_names(share / TRASH)
    written = sorted(kept + in_trash)

    # One row and one `indexed` event per checkpoint, whoever saw it first.
    paths = Counter(r[0] for r in catalog.rows("SELECT path FROM checkpoints"))
    assert all(n == 1 for n in paths.values()), paths
    assert sorted(os.path.basename(p) for p in paths) == sorted(written)
    indexed = Counter(
        r[0] for r in catalog.rows("SELECT path FROM events WHERE action = 'indexed'")
    )
    assert indexed == Counter(paths), indexed

    # Nothing trashed twice, nor wrongly: the trash holds each trashed checkpoint once, and the
    # newest KEEP_LAST epochs are in place.
    trashed = catalog.rows(
        "SELECT checkpoint_id, count(*) FROM events WHERE action = 'trash' AND state = 'done'"
        " GROUP BY checkpoint_id"
    )
    assert trashed and all(n == 1 for _id, n in trashed), trashed
    assert len(in_trash) == len(set(in_trash)) == len(trashed)  # each file once in the trash
    assert kept == written[-KEEP_LAST:], kept  # the newest epochs: never trashed
    assert len(in_trash) == len(written) - KEEP_LAST
    # A file moved by one host's prune is never taken for missing by another host's scan.
    assert catalog.rows("SELECT count(*) FROM events WHERE action = 'missing'")[0][0] == 0
    statuses = catalog.rows("SELECT status, count(*) FROM checkpoints GROUP BY status")
    assert dict(statuses) == {"ok": KEEP_LAST, "trashed": len(in_trash)}, statuses

    # Two daemons running, one not; and the audit log names the node of every act.
    ws_a = hosts[NODES[0]][0] if victim != NODES[0] else hosts[NODES[1]][0]
    status = json.loads(ws_a.run("status", "--json", check=False).stdout)
    running = sorted(d["node"] for d in status["daemons"] if d["running"])
    assert running == sorted(set(NODES) - {victim}), status["daemons"]
    assert status["running"] is True
    nodes = Counter(r[0] for r in catalog.rows("SELECT node FROM events"))
    assert set(nodes) <= set(NODES) and None not in nodes, nodes
    assert len(nodes) >= 2, nodes  # the work was shared
    for node, d in daemons.items():
        if node != victim:
            assert d.stop() == 0
    postgres.drop(url)
