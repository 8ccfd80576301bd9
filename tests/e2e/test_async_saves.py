"""Async saves end to end: `ckpt scan` on real Orbax and DCP folders, a writer SIGKILLed
mid-save (`incomplete`, then `abandoned` after a shortened `completion.abandoned_after`, never
`ok`, never answered by `latest` or `wait`; flagged by `ckpt runs` / `ckpt status`, a
`save_failed` hook; trashed by retention with its reason, never while a writer holds one of its
files), a hostile DCP `.metadata` never run; describe and verify of the folders."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from ckpt_daemon.api import open_catalog
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.children.sandbox import CONFINED as SANDBOXED
from ckpt_daemon.cli import documents
from ckpt_daemon.core.retention import Policy
from ckpt_daemon.service.hooks import HookRunner, Notifications
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.settings.operations import Hook
from ckpt_daemon.usecases import indexer
from ckpt_daemon.usecases.describe import render
from ckpt_daemon.usecases.retention_plan import PruneReport
from tests.support import Workspace
from tests.support.async_saves import generate
from tests.support.browser import web_page

ABANDONED_AFTER_S = 3.0
KEEP_LAST_1 = Policy(keep_last=1)


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return (os.system, (self.command,))


def rows(ws: Workspace) -> dict[str, dict]:
    return {r["path"].split("/runs/", 1)[1]: r for r in ws.json("list", "--all")}


def test_killed_save_is_incomplete_then_abandoned_and_never_answers(
    workspace: Workspace, async_saves: Path, tmp_path: Path
) -> None:
    ws = workspace
    plain = ws.config.read_text()
    run = ws.root / "killed"
    generate("orbax-killed", run)  # a real async save, SIGKILLed right after save() returned
    assert (run / "2.orbax-checkpoint-tmp").is_dir() and (run / "1").is_dir()
    for name in ("orbax-sync", "dcp", "keras-orbax"):
        shutil.copytree(async_saves / name, ws.root / name)
    outside = tmp_path / "outside"
    outside.mkdir()
    hostile = shutil.copytree(async_saves / "dcp" / "step-7", ws.root / "evil" / "step-1")
    (hostile / ".metadata").write_bytes(pickle.dumps(_System(f"touch {outside / 'PWNED'}"), 4))
    swapped = shutil.copytree(async_saves / "dcp" / "step-7", ws.root / "swapped" / "step-1")

    ws.run("scan", check=False)
    found = rows(ws)
    assert found["killed/2.orbax-checkpoint-tmp"]["status"] == "incomplete", found
    assert "in flight" in found["killed/2.orbax-checkpoint-tmp"]["reason"]
    for ok in ("killed/1", "orbax-sync/2", "orbax-sync/3", "dcp/step-7", "keras-orbax/2"):
        assert found[ok]["status"] == "ok", found[ok]
    assert found["orbax-sync/3"]["metrics"] == {"loss": 0.4}
    assert found["dcp/step-7"]["format"] == "torch-dcp"
    assert found["evil/step-1"]["status"] == "corrupt"
    assert "posix.system" in found["evil/step-1"]["reason"]
    assert not (outside / "PWNED").exists()
    # in flight: kept by retention ("incomplete"), not flagged as a failed save
    tmp_path_text = str(run / "2.orbax-checkpoint-tmp")
    with open_catalog(str(ws.config)) as cat:
        assert decisions(cat.plan_prune(["killed"], KEEP_LAST_1))[tmp_path_text] == (
            "keep",
            ("incomplete",),
        )
        assert {r.name: r for r in cat.runs()}["killed"].last_save_failed is None
    latest = ws.run("latest", "--run", "killed").stdout.strip()
    assert latest.endswith("/killed/1")
    overview = {r["name"]: r for r in web_page(ws.config, "/api/runs")[1]["runs"]}
    assert overview["killed"]["last_save_unfinished"] is True  # the web view's status flag
    assert overview["killed"]["flags"] == {"incomplete": 1}
    assert overview["orbax-sync"]["last_save_unfinished"] is False
    assert "last save did not complete" in web_page(ws.config, "/", q="killed")[1]
    assert "last save did not complete" not in web_page(ws.config, "/", q="orbax-sync")[1]
    resumable = ws.run("latest", "--run", "orbax-sync", "--resumable").stdout.strip()
    assert resumable.endswith("/orbax-sync/3")

    # the default 1h has not passed; a shortened abandoned_after has
    short = f"completion:\n  abandoned_after: {ABANDONED_AFTER_S:g}s\n"
    ws.config.write_text(plain.replace("completion:\n", short))
    newest = max(p.stat().st_mtime for p in (run / "2.orbax-checkpoint-tmp").rglob("*"))
    while time.time() < newest + ABANDONED_AFTER_S + 0.5:
        time.sleep(0.2)
    hooked = scan_with_hooks(ws, tmp_path / "hooks.jsonl")
    killed = rows(ws)["killed/2.orbax-checkpoint-tmp"]
    assert killed["status"] == "abandoned", killed
    assert "did not complete" in killed["reason"] and "no writer" in killed["reason"]
    assert [(d["event"], d["path"], d["run"]) for d in hooked] == [
        ("save_failed", tmp_path_text, "killed")
    ]
    assert "did not complete" in hooked[0]["reason"]
    overview = {r["name"]: r for r in web_page(ws.config, "/api/runs")[1]["runs"]}
    assert overview["killed"]["flags"] == {"abandoned": 1}
    assert overview["killed"]["last_save_unfinished"] is True
    waited = ws.run("wait", "--run", "killed", "--newer-than", "1", "--timeout", "1s", check=False)
    assert waited.returncode == 6  # an abandoned save is never the new checkpoint

    # flagged: the run's last save did not complete (keras#23609), in runs and status
    table = ws.run("runs").stdout
    assert "last save did not complete: 2.orbax-checkpoint-tmp (abandoned)" in table
    status = ws.run("status").stdout  # the fast path's read
    assert f"run killed: last save did not complete: {tmp_path_text} (abandoned: " in status
    with open_catalog(str(ws.config)) as cat:
        flagged = {r["name"]: r for r in documents.runs(cat.runs())}  # `runs --json`'s rows
        assert flagged["killed"]["last_save_failed"]["path"] == tmp_path_text
        assert flagged["killed"]["last_save_failed"]["status"] == "abandoned"
        assert flagged["orbax-sync"]["last_save_failed"] is None
        assert [(s["run"], s["path"]) for s in cat.status()["last_save_failed"]] == [
            ("evil", str(hostile)),  # a corrupt save, with nothing ok before it: failed too
            ("killed", tmp_path_text),
        ]
        # Retention trashes it (its own reason) through the rail: never while a writer has one
        # of its files open (one came back after the scan), never the newest complete one.
        member = next(p for p in (run / "2.orbax-checkpoint-tmp").rglob("*") if p.is_file())
        code = f"f = open({str(member)!r}, 'ab'); print('open', flush=True); input()"
        writer = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "open"
            [failure] = cat.prune(["killed"], KEEP_LAST_1).failures
            assert "being written now" in failure["error"], failure
            assert f"pid {writer.pid}" in failure["error"]
            assert (run / "2.orbax-checkpoint-tmp").is_dir()
        finally:
            writer.kill()
            writer.communicate()
        report = cat.prune(["killed"], KEEP_LAST_1)
        assert report.failures == [] and report.runs[0].moved is not None
        action, reasons = decisions(report)[tmp_path_text]
        assert action == "trash" and reasons[0].startswith("abandoned: save did not complete")
        assert decisions(report)[str(run / "1")][0] == "keep"
        assert not (run / "2.orbax-checkpoint-tmp").exists() and (run / "1").is_dir()
        [trashed] = cat.trash()
        assert trashed["path"] == tmp_path_text and trashed["reason"].startswith("abandoned")
        assert cat.get(str(run / "1")).status.value == "ok"

    # describe and verify the folder checkpoints: from their metadata, every file hashed
    dcp, orbax = ws.root / "dcp" / "step-7", ws.root / "orbax-sync" / "3"
    with open_catalog(str(ws.config)) as cat:
        card = json.loads(render(cat.describe(str(dcp)), "json"))
        assert card["what"]["format"].startswith("torch-dcp")
        assert card["what"]["resumable"].startswith("yes") and card["epoch"]["step"] == "7"
        assert card["layers"][0]["shapes"] == "8x4, 8, 3x8, 3"  # Linear(4, 8), Linear(8, 3)
        card = json.loads(render(cat.describe(str(orbax)), "json"))
        assert card["what"]["format"].startswith("orbax-step") and card["epoch"]["step"] == "3"
        assert card["metrics"] == [{"name": "loss", "value": "0.4", "source": "checkpoint"}]
        verdicts = cat.verify([str(dcp), str(orbax)])
        assert [(v.ok, v.detail) for v in verdicts] == [(True, "hash matches")] * 2
        # --load: each folder loaded by its library in a child, its arrays matched to the index
        verdicts = cat.verify([str(dcp), str(orbax)], load=True)
        loads = [v.detail for v in verdicts if v.detail.startswith("load")]
        assert [v.ok for v in verdicts] == [True] * 4, verdicts
        assert loads[0].startswith(f"loads with torch (16 arrays, {SANDBOXED})"), loads
        assert loads[0].endswith("the 4 indexed weights' shapes match")
        assert loads[1].startswith(f"loads with orbax (3 arrays, {SANDBOXED})"), loads
        assert loads[1].endswith("the 3 indexed weights' shapes match")
        # a `.metadata` swapped for a hostile pickle after it was indexed: refused, never run
        (swapped / ".metadata").write_bytes(pickle.dumps(_System(f"touch {outside / 'PWNED'}"), 4))
        *_, refused = cat.verify([str(swapped)], load=True)
        assert not refused.ok and "load refused, nothing of the file run" in refused.detail
        assert "posix.system" in refused.detail, refused
        assert not (outside / "PWNED").exists()
        data = dcp / "__0_0.distcp"
        before = data.stat()
        with data.open("r+b") as fh:  # bit rot: one byte, same size and mtime
            first = fh.read(1)
            fh.seek(0)
            fh.write(bytes([first[0] ^ 0xFF]))
        os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
        [rotten] = cat.verify([str(dcp)])
        assert not rotten.ok and "marked corrupt" in rotten.detail


def test_a_save_killed_as_it_began_is_as_new_as_its_folder(
    workspace: Workspace, async_saves: Path
) -> None:
    """An Orbax step folder killed before its first file (an empty `.orbax-checkpoint-tmp`,
    seen once as a CI run's killed save) is dated by the folder, not 1970: it is the run's last
    save, flagged as unfinished, abandoned in time and trashed by retention through the rail
    (whose re-check reads the empty folder as the indexer recorded it)."""
    ws = workspace
    plain = ws.config.read_text()
    run = ws.root / "began"
    shutil.copytree(async_saves / "orbax-sync" / "2", run / "2")  # a complete step, its mtimes
    began = run / "3.orbax-checkpoint-tmp"
    began.mkdir()  # killed as it began: no file yet
    ws.run("scan", check=False)
    found = rows(ws)["began/3.orbax-checkpoint-tmp"]
    assert found["status"] == "incomplete", found
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(began.stat().st_mtime))
    assert found["mtime"].startswith(when), (found["mtime"], when)  # was 1970-01-01T00:00:00
    overview = {r["name"]: r for r in web_page(ws.config, "/api/runs")[1]["runs"]}
    assert overview["began"]["last_save_unfinished"] is True

    short = f"completion:\n  abandoned_after: {ABANDONED_AFTER_S:g}s\n"
    ws.config.write_text(plain.replace("completion:\n", short))
    while time.time() < began.stat().st_mtime + ABANDONED_AFTER_S + 0.5:
        time.sleep(0.2)
    ws.run("scan", check=False)
    assert rows(ws)["began/3.orbax-checkpoint-tmp"]["status"] == "abandoned"
    with open_catalog(str(ws.config)) as cat:
        report = cat.prune(["began"], KEEP_LAST_1)
    assert report.failures == [], report.failures
    assert decisions(report)[str(began)][0] == "trash"
    assert not began.exists() and (run / "2").is_dir()


def decisions(report: PruneReport) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {d.path: (d.action, d.reasons) for rp in report.runs for d in rp.plan.decisions}


def scan_with_hooks(ws: Workspace, out: Path) -> list[dict]:
    """A scan as the service's worker makes it, its report told to a real `save_failed` hook."""
    config = config_module.load(str(ws.config))
    store = Store(config.database)
    writer = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    hook = Hook(("save_failed",), (sys.executable, "-c", writer))
    runner = HookRunner((hook,), threading.Event())
    runner.start()
    try:
        report = indexer.scan(config, store, actor="test")
        Notifications(runner, store, lambda: config).scanned(report)
        deadline = time.monotonic() + 60
        while runner.ran + runner.failed < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.stopping.set()
        runner.stop()  # the hook it runs, finished
        store.close()
    assert runner.failed == 0 and runner.queue.empty()  # one document, nothing more queued
    return [json.loads(line) for line in out.read_text().splitlines()]
