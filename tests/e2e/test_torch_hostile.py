"""Hostile torch-family files (tests/support/hostile_torch.py: a `__reduce__` to `os.system`,
deep nesting, huge memos, a zip bomb in `data/`, a safetensors header claiming 2^60 bytes)
through `ckpt scan`, `show`, `serve --once`, `split`, `verify --load` (torch's weights_only in
a child) and a live daemon: nothing runs (the marker file
outside the root never appears), nothing dies, every file is recorded with its reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace, service_workspace
from tests.support import hostile_files as hf
from tests.support import hostile_torch as ht
from tests.support.forked_cli import ckpt_process

TORCH_KINDS = {k: v for k, v in hf.KINDS.items() if k.startswith(("torch_", "safetensors_"))}
HANG_SECONDS = 120


def ckpt(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return ckpt_process(["--config", str(ws.config), *args], timeout=HANG_SECONDS, cwd=ws.base)


def build(root: Path, outside: Path) -> dict[str, Path]:
    built = {}
    for name, kind in TORCH_KINDS.items():
        folder = root / name
        folder.mkdir(parents=True)
        built[name] = kind.build(folder, outside)
    return built


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["path"]: r for r in json.loads(ckpt(ws, "list", "--json").stdout)}


def check_recorded(ws: Workspace, built: dict[str, Path]) -> None:
    found = rows(ws)
    for name, path in built.items():
        expected = TORCH_KINDS[name]
        row = found[str(path)]
        assert row["status"] == expected.expect, (name, row)
        if expected.expect != "ok":
            assert expected.reason.lower() in (row["reason"] or "").lower(), (name, row)
        shown = ckpt(ws, "show", str(row["id"]), "--json")
        assert shown.returncode == 0, shown.stderr
        if "system" in name:
            notes = json.loads(shown.stdout)["notes"]
            assert any("posix.system" in n and "never run" in n for n in notes), notes


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outside")


def test_hostile_torch_files_through_scan_show_and_serve_once(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    built = build(ws.root, outside)
    scanned = ckpt(ws, "scan", "--json")
    assert scanned.returncode == 3, scanned.stderr  # partial failure: the corrupt ones
    check_recorded(ws, built)
    once = ckpt(ws, "serve", "--once")
    assert once.returncode in (0, 3), once.stderr
    found = rows(ws)
    evil = [
        found[str(built[k])]["id"]
        for k in ("torch_reduce_to_system", "torch_legacy_reduce_to_system")
    ]
    split = ckpt(ws, "split", str(evil[0]))
    assert split.returncode == 2 and "no optimizer state" in split.stderr, split
    bomb = found[str(built["torch_storage_bomb"])]["id"]
    loaded = ckpt(ws, "verify", "--load", "--json", *map(str, [*evil, bomb]))
    assert loaded.returncode == 3, loaded.stderr  # torch's weights_only refused both
    verdicts = [v for v in json.loads(loaded.stdout) if "load" in v["detail"]]
    assert len(verdicts) == 3 and not any(v["ok"] for v in verdicts), verdicts
    assert sum("refused by torch" in v["detail"] for v in verdicts) == 2, verdicts
    assert sum("posix.system" in v["detail"] for v in verdicts) == 2, verdicts
    assert any("load: not run (corrupt" in v["detail"] for v in verdicts), verdicts
    assert not (outside / ht.MARKER).exists()
    assert list(outside.iterdir()) == []


def test_a_live_daemon_records_every_hostile_torch_file_and_keeps_running(
    tmp_path: Path, outside: Path
) -> None:
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    built = build(ws.root, outside)

    def all_settled() -> bool:
        found = rows(ws)
        return all(
            str(p) in found and found[str(p)]["status"] != "incomplete" for p in built.values()
        )

    daemon.wait_until(all_settled, HANG_SECONDS, "every hostile file recorded")
    check_recorded(ws, built)
    assert not (outside / ht.MARKER).exists()
    assert daemon.stop() == 0, daemon.log
