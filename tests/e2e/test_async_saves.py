"""Async saves end to end: `ckpt scan` on real Orbax and DCP folders, a writer SIGKILLed
mid-save (`incomplete`, then `abandoned` after a shortened `completion.abandoned_after`, never
`ok`, never answered by `latest` or `wait`), a hostile DCP `.metadata` never run."""

from __future__ import annotations

import os
import pickle
import shutil
import time
from pathlib import Path

from tests.support import Workspace
from tests.support.async_saves import generate
from tests.support.browser import web_page

ABANDONED_AFTER_S = 3.0


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
    ws.run("scan", check=False)
    killed = rows(ws)["killed/2.orbax-checkpoint-tmp"]
    assert killed["status"] == "abandoned", killed
    assert "did not complete" in killed["reason"] and "no writer" in killed["reason"]
    overview = {r["name"]: r for r in web_page(ws.config, "/api/runs")[1]["runs"]}
    assert overview["killed"]["flags"] == {"abandoned": 1}
    assert overview["killed"]["last_save_unfinished"] is True
    waited = ws.run("wait", "--run", "killed", "--newer-than", "1", "--timeout", "1s", check=False)
    assert waited.returncode == 6  # an abandoned save is never the new checkpoint
