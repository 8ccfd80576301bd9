"""No last copy freed on trust (issue 40, item 5), against a real S3 API server on loopback.

A tiered checkpoint's local copy waits in the trash. Its object deleted behind our back (a
lifecycle rule, a wrong `aws s3 rm`): `ckpt trash purge` reads the remote copy back first and
keeps the local copy, exit 3 with a one-line reason, the copy marked `missing` (so `location`
no longer says `remote`), while a tiered checkpoint whose object is there is purged as before.
The service reads back a sample of the remote copies on its `remote_verify` schedule: an object
deleted behind its back is marked within a pass, with no command run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.s3_server import CREDENTIALS, S3Server
from tests.support.workspace import Workspace

RUN = "k3/run_zip"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _aws_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def tiered(
    tmp_path: Path, s3: S3Server, fixtures: Path, bucket: str, extra: str = ""
) -> tuple[Workspace, Any, dict[str, str]]:
    """A workspace tiering to `bucket`; its run's two oldest `.keras` files tiered (their local
    copies in the trash). Returns the workspace, the bucket's client, {path: object key}."""
    client = s3.bucket(bucket)
    ws = Workspace(tmp_path)
    ws.config.write_text(
        ws.config.read_text()
        + f"remote:\n  url: s3://{bucket}/team\n  endpoint_url: {s3.url}\n  region: us-east-1\n"
        + extra
    )
    shutil.copytree(fixtures / RUN, ws.root / RUN)
    ws.run("scan")
    targets = sorted((ws.root / RUN).glob("*.keras"))[:2]
    keys = {}
    for target in targets:
        done = ws.json("tier", str(target))
        (item,) = done["items"]
        keys[str(target)] = item["remote_url"].split("/", 3)[3]
        assert not target.exists()
    return ws, client, keys


def location(ws: Workspace, path: str) -> str:
    (row,) = [r for r in ws.json("list", "--all") if r["path"] == path]
    return str(row["location"])


def test_purge_keeps_the_last_copy_when_its_object_is_gone(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, client, keys = tiered(tmp_path, s3, keras_checkpoints, "ckpt-purge-trust")
    gone, kept = keys
    assert location(ws, gone) == "remote"
    client.delete_object(Bucket="ckpt-purge-trust", Key=keys[gone])  # behind our back
    trash = {t["path"]: t for t in ws.json("trash", "list")}
    local_copy = Path(trash[gone]["paths"][0])
    assert local_copy.exists()

    done = ws.run("trash", "purge", "--older-than", "0s", check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    (failed,) = done.stderr.strip().splitlines()[:1]
    shown = Path(gone).relative_to(ws.root)  # as every text line prints a path
    assert failed.startswith(f"failed: {shown}: not purged, the local copy is the last one:")
    assert "remote copy missing (not in the store)" in failed, failed
    assert local_copy.exists(), "the last copy anywhere stays"
    # its object is there: purged as before
    assert f"purged: {Path(kept).relative_to(ws.root)}" in done.stdout
    assert location(ws, gone) == "none"  # not `remote` any more: the trash holds it
    assert gone in {t["path"] for t in ws.json("trash", "list")}
    events = [e for e in ws.json("log") if e["action"] == "verify-remote"]
    assert [e["path"] for e in events] == [gone], events
    ws.run("trash", "restore", gone)  # the kept copy is whole: it comes back
    assert Path(gone).is_file()


def test_the_service_re_verifies_remote_copies_on_its_schedule(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, client, keys = tiered(
        tmp_path,
        s3,
        keras_checkpoints,
        "ckpt-resample",
        "schedule:\n  remote_verify: 1s\n  remote_sample: 1\n  purge: 0\n",
    )
    gone, still = keys
    client.delete_object(Bucket="ckpt-resample", Key=keys[gone])
    daemon = Daemon(ws)
    try:
        daemon.wait_until(lambda: location(ws, gone) == "none", 120, "the copy marked missing")
        daemon.wait_for_log("event=remote_verify_failed", 60)
    finally:
        assert daemon.stop() == 0, daemon.log
    assert location(ws, still) == "remote"
    (copy,) = [e for e in ws.json("log") if e["action"] == "verify-remote" and e["path"] == gone]
    assert "missing: not in the store" in copy["reason"], copy
    assert json.loads(json.dumps(copy))["actor"].startswith("daemon:")
