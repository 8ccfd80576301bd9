"""Cluster storage (fs.mounts, usecases.trash_in_place): a root whose rename fails keeps its
trash in the catalog. The filesystem is real: every `ckpt` and the daemon run as fresh processes
with `tests/support/no_rename.c` preloaded, which fails rename(2)/renameat(2)/renameat2(2)
under the root as an object store's FUSE mount does (ENOSYS); an injected mount table
(`CKPT_MOUNTINFO`) says a root is on mountpoint-s3, Lustre or gcsfuse. The trashed files stay at
their paths, invisible to every answer and skipped by scans, `trash restore` only clears the
record, the purge deletes them there when due, and never a new save at the same path."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Daemon, Workspace, no_rename, service_workspace

RUN, FILES = ZIP_RUN, ZIP_FILES


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return no_rename.build(tmp_path_factory.mktemp("no-rename"))


def _ckpt(ws: Workspace, env: dict[str, str], *args: str, check: bool = True) -> Any:
    """`ckpt ARGS --json` as a fresh interpreter (the preload takes effect at exec); `ARGS`
    ending with "-": without --json."""
    tail = ["--json"] if args[-1] != "-" else []
    args = args if tail else args[:-1]
    cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args, *tail]
    result = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=ws.base, timeout=120
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return json.loads(result.stdout) if tail else result.stdout


def _names(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(Path(r["path"]).name for r in rows)


def test_a_root_that_cannot_rename_trashes_in_place_and_purges_only_what_it_trashed(
    workspace: Workspace, keras_checkpoints: Path, library: Path
) -> None:
    ws = workspace
    env = no_rename.env(library, ws.root, errno.ENOSYS)
    run = ws.root / RUN
    run.mkdir(parents=True)
    for name in FILES:
        shutil.copy2(keras_checkpoints / RUN / name, run / name)
    ws.run("scan")  # reads rename nothing: the forked CLI; every act under the preload
    pruned = _ckpt(ws, env, "prune", "--run", RUN, "--keep-last", "1")
    assert pruned["failures"] == [] and pruned["runs"][0]["trashed"] == 2, pruned
    assert sorted(p.name for p in run.iterdir()) == FILES  # nothing moved
    assert _names(ws.json("list")) == [FILES[2]]
    trash = {Path(t["path"]).name: t for t in ws.json("trash", "list")}
    assert sorted(trash) == FILES[:2]
    for t in trash.values():
        assert t["in_place"] and t["paths"] == t["members"] == [t["path"]], t
        assert "ENOSYS" in t["why"], t
    ws.run("scan")  # still those bytes: skipped, never a new row
    assert _names(ws.json("list")) == [FILES[2]]
    assert ws.json("latest", "--run", RUN)["path"].endswith(FILES[2])
    # restore: the record cleared, the file where it always was
    _ckpt(ws, env, "trash", "restore", str(trash[FILES[0]]["id"]), "-")
    assert _names(ws.json("list")) == [FILES[0], FILES[2]]
    # a new save at the path of a trashed file (the trainer's next epoch wrote that name)
    new_save = (keras_checkpoints / RUN / FILES[2]).read_bytes() + bytes(3)  # its own bytes
    (run / FILES[1]).write_bytes(new_save)  # zip readers skip the tail
    purged = _ckpt(ws, env, "trash", "purge", "--older-than", "0")
    assert _names(purged["purged"]) == [FILES[1]] and purged["failures"] == [], purged
    assert sorted(p.name for p in run.iterdir()) == FILES  # the new file was not deleted
    ws.run("scan")  # ... and is indexed as the new file it is
    assert _names(ws.json("list")) == FILES
    # once more, its trainer's rotation removing it first: nothing left to delete, no failure
    _ckpt(ws, env, "prune", "--run", RUN, "--keep-last", "1")
    assert _names(ws.json("trash", "list")) == [FILES[0]]
    (run / FILES[0]).unlink()
    purged = _ckpt(ws, env, "trash", "purge", "--older-than", "0")
    assert purged["failures"] == [] and _names(purged["purged"]) == [FILES[0]], purged
    assert sorted(p.name for p in run.iterdir()) == FILES[1:]
    assert not list((ws.root / ".ckpt-trash").rglob("*.keras"))


def test_the_daemon_on_a_root_without_rename_deletes_what_retention_dooms_when_due(
    tmp_path: Path, keras_checkpoints: Path, library: Path
) -> None:
    ws = service_workspace(
        tmp_path,
        "  retention: 1s\n  purge: 1s\ntrash:\n  purge_after: 2s\nretention:\n  keep_last: 1\n",
    )
    root_line = f"  - path: {ws.root}\n"
    ws.config.write_text(
        ws.config.read_text().replace(root_line, root_line + "    poll_interval: 1s\n")
    )
    table = tmp_path / "mountinfo"  # the root is on Lustre: inotify would miss other hosts
    table.write_text(
        f"22 1 253:1 / / rw - ext4 /dev/vda rw\n40 22 0:5 / {ws.root} rw - lustre fs rw\n"
    )
    env = {**no_rename.env(library, ws.root, errno.ENOTSUP), "CKPT_MOUNTINFO": str(table)}
    daemon = Daemon(ws, env=env, wrap=("env",))  # a fresh interpreter: the preload applies
    run = ws.root / RUN
    run.mkdir(parents=True)
    for name in FILES:
        shutil.copy2(keras_checkpoints / RUN / name, run / name)
    daemon.wait_until(
        lambda: sorted(p.name for p in run.iterdir()) == [FILES[2]], timeout=60, what="purge"
    )
    # polled (no rescans: the polling observer found the files), its own rename probe failed
    [root] = ws.json("status")["roots"]
    assert (root["observer"], root["filesystem"], root["events"]) == ("polling", "lustre", False)
    assert (root["trash"], root["path"]) == ("in_place", str(ws.root)), root
    assert daemon.stop() == 0
    assert _names(_ckpt(ws, env, "list")) == [FILES[2]]
    purged = _ckpt(ws, env, "list", "--status", "purged")
    assert _names(purged) == FILES[:2], purged


def test_config_check_says_each_roots_filesystem_events_and_trash(
    tmp_path: Path, workspace: Workspace
) -> None:
    ws = workspace
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 253:1 / / rw - ext4 /dev/vda rw\n"
        f"43 22 0:53 / {ws.root} rw,nosuid - fuse mountpoint-s3 rw,user_id=0\n"
    )
    env = {"CKPT_MOUNTINFO": str(table)}
    text = ws.run("config", "check", env=env).stdout
    assert f"filesystem fuse (mountpoint-s3) at {ws.root}" in text, text
    assert "inotify sees no other host's writes: polled (observer polling)" in text, text
    assert "trash kept in the catalog" in text and "has no rename" in text, text
    table.write_text(
        f"22 1 253:1 / / rw - ext4 /dev/vda rw\n44 22 0:5 / {ws.root} rw - lustre fs rw\n"
    )
    text = ws.run("config", "check", env=env).stdout
    assert "filesystem lustre" in text and "(observer polling)" in text, text
    assert "trash moves files into .ckpt-trash: rename works here" in text, text
    os.environ.pop("CKPT_MOUNTINFO", None)
    text = ws.run("config", "check").stdout  # this machine's own table: a local disk
    assert "inotify events arrive (observer inotify)" in text, text


def test_a_mount_table_saying_object_store_trashes_in_place_without_trying_a_rename(
    tmp_path: Path, workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    table = tmp_path / "mountinfo"
    table.write_text(
        f"22 1 253:1 / / rw - ext4 /dev/vda rw\n44 22 0:5 / {ws.root} rw - fuse.gcsfuse b rw\n"
    )
    env = {"CKPT_MOUNTINFO": str(table)}
    run = ws.root / RUN
    run.mkdir(parents=True)
    for name in FILES:
        shutil.copy2(keras_checkpoints / RUN / name, run / name)
    ws.run("scan", env=env)
    ws.run("prune", "--run", RUN, "--keep-last", "2", env=env)
    [item] = json.loads(ws.run("trash", "list", "--json", env=env).stdout)
    assert item["in_place"] and "fuse.gcsfuse" in item["why"], item
    assert (run / FILES[0]).exists() and not (ws.root / ".ckpt-trash").exists()
