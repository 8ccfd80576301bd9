"""Object storage through the CLI against a real S3 API server on loopback (moto's server mode,
started by the suite): config refusals, `ckpt tier` (upload, verify, record, then the local
trash), listings' `location`, `ckpt fetch` (verified against the catalog's hash), a start that
aborts the multipart uploads a killed tier left, and a live daemon tiering by policy
(`tier_after`, `keep_local`) with its hook, metrics and `du`, then `best`/`latest` answered
from the store (`--fetch`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.browser import web_page
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


_buckets = iter(range(10_000))


def remote_workspace(
    tmp_path: Path, s3: S3Server, fixtures: Path, *, scan: bool = True
) -> tuple[Workspace, str, Any]:
    bucket = f"ckpt-test-{next(_buckets)}"
    client = s3.bucket(bucket)
    ws = Workspace(tmp_path)
    ws.config.write_text(
        ws.config.read_text()
        + f"remote:\n  url: s3://{bucket}/team\n  endpoint_url: {s3.url}\n  region: us-east-1\n"
    )
    shutil.copytree(fixtures / RUN, ws.root / RUN)
    if scan:
        ws.run("scan")
    return ws, bucket, client


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tier_uploads_verifies_records_then_trashes_and_fetch_brings_it_back(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    target = ws.root / RUN / "e01-vl1.683.keras"
    original = target.read_bytes()
    (row,) = [r for r in ws.json("list") if r["path"] == str(target)]
    assert (row["location"], row["remote_url"]) == ("local", None)

    planned = ws.json("tier", str(target), "--dry-run")
    assert [i["action"] for i in planned["items"]] == ["tier"]
    assert target.exists() and client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0

    done = ws.json("tier", str(target))
    url = done["items"][0]["remote_url"]
    assert done["items"][0]["done"] is True and not done["failures"]
    assert not target.exists()  # freed only after the copy verified
    key = url.removeprefix(f"s3://{bucket}/")
    assert key.startswith("team/runs/k3/run_zip/") and key.endswith("/e01-vl1.683.keras")
    head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(original)
    assert head["Metadata"]["ckpt-hash"] == row["hash"]
    assert head["ChecksumSHA256"]
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == original

    remote_rows = ws.json("list", "--location", "remote")
    assert [(r["path"], r["location"], r["remote_url"]) for r in remote_rows] == [
        (str(target), "remote", url)
    ]
    local = ws.json("list", "--location", "local")
    assert str(target) not in {r["path"] for r in local} and len(local) == 2
    # The web view's run page marks it remote, with list --json's location and URL.
    status, doc = web_page(ws.config, "/api/run", run=RUN)
    assert status == 200
    shown = doc["marks"][str(row["id"])]
    assert (shown["location"], shown["remote_url"]) == ("remote", url)
    assert "remote" in shown["marks"] and "trashed" in shown["marks"]
    others = [v for k, v in doc["marks"].items() if k != str(row["id"])]
    assert len(others) == 2 and all(v["location"] == "local" for v in others)
    assert all("remote" not in v["marks"] for v in others)
    html = web_page(ws.config, "/run", run=RUN)[1]
    assert f'data-id="{row["id"]}" data-marks="trashed remote"' in html  # its curve marker

    # The local trash still has it: fetch restores it from there (no network needed).
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(target)
    assert target.read_bytes() == original
    (back,) = [r for r in ws.json("list") if r["path"] == str(target)]
    assert (back["location"], back["remote_url"]) == ("both", url)


def test_fetch_after_the_purge_streams_the_copy_back_verified(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, _bucket, _client = remote_workspace(tmp_path, s3, keras_checkpoints)
    target = ws.root / RUN / "e02-vl1.663.keras"
    original = target.read_bytes()
    ws.run("tier", str(target))
    ws.run("trash", "purge", "--older-than", "0s")
    assert not list((ws.root / ".ckpt-trash").rglob("e02*"))
    (row,) = [r for r in ws.json("list", "--location", "remote")]
    assert row["status"] == "purged"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert ws.run("fetch", str(row["id"]), "--to", str(elsewhere)).stdout.strip() == str(
        elsewhere / target.name
    )
    assert (elsewhere / target.name).read_bytes() == original

    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(target)
    assert target.read_bytes() == original
    (back,) = [r for r in ws.json("list") if r["path"] == str(target)]
    assert (back["status"], back["location"]) == ("ok", "both")
    assert back["hash"] == row["hash"]
    # The fetched file is the indexed one, identity included: a scan does not read it again.
    rescan = ws.json("scan")
    assert rescan["indexed"] == [] and not rescan["failed"], rescan


def test_a_remote_copy_with_other_bytes_is_never_fetched(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    target = ws.root / RUN / "e01-vl1.683.keras"
    url = ws.json("tier", str(target))["items"][0]["remote_url"]
    key = url.removeprefix(f"s3://{bucket}/")
    forged = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    forged[len(forged) // 2] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(forged))
    out = tmp_path / "copy.keras"
    result = ws.run("fetch", str(target), "--to", str(out), check=False)
    assert result.returncode == 3, result.stderr
    assert "hash" in result.stderr and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ckpt-tmp")]


def test_other_bytes_under_the_indexed_stat_are_never_sent_nor_freed(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    """Same size, mtime and inode, one byte flipped: the stat check before the upload cannot
    tell, the upload's own hash of what it reads (one pass) does: aborted before it completes,
    nothing under the key, no upload left, the file kept where it is, no copy recorded."""
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    target = ws.root / RUN / "e02-vl1.663.keras"
    info = target.stat()
    flipped = bytearray(target.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    with open(target, "r+b") as f:
        f.write(flipped)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_ino) == (info.st_size, info.st_ino)

    result = ws.run("tier", str(target), "--json", check=False)
    assert result.returncode != 0, result.stdout
    done = json.loads(result.stdout)
    assert done["items"][0]["done"] is False
    assert "not the ones indexed" in done["failures"][0]["error"], done
    assert target.read_bytes() == flipped  # kept, as it is
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert ws.json("list", "--location", "remote") == []


def test_pinned_checkpoints_are_skipped_with_the_reason(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, _bucket, _client = remote_workspace(tmp_path, s3, keras_checkpoints)
    target = ws.root / RUN / "e03-vl1.643.keras"
    ws.run("pin", str(target))
    (item,) = ws.json("tier", str(target))["items"]
    assert item["action"] == "skip" and "pinned" in item["reasons"][0]
    assert target.exists()


def test_config_refuses_credentials_and_bad_urls_with_the_key(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    base = ws.config.read_text()
    for remote, key in (
        ("remote:\n  url: s3://bkt/p\n  aws_secret_access_key: x\n", "remote.aws_secret_acc"),
        ("remote:\n  url: http://bkt/p\n", "remote.url"),
        ("remote:\n  url: s3://B_d/p\n", "remote.url"),
        ("remote:\n  url: s3://bkt/p\n  endpoint_url: ftp://x\n", "remote.endpoint_url"),
    ):
        ws.config.write_text(base + remote)
        result = ws.run("config", "check", check=False)
        assert result.returncode == 2 and f"config: {key}" in result.stderr, result.stderr
        assert "testing-secret" not in result.stderr


def test_serve_refuses_an_unreachable_bucket_and_aborts_stale_uploads(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    stale = client.create_multipart_upload(Bucket=bucket, Key="team/runs/k3/x/y.keras")
    other = client.create_multipart_upload(Bucket=bucket, Key="elsewhere/z.keras")
    ws.run("serve", "--once")
    left = {u["UploadId"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}
    assert stale["UploadId"] not in left and other["UploadId"] in left  # only under our prefix
    (probed,) = ws.json("status")["remotes"]  # the start's probe, kept for `ckpt status`
    assert (probed["url"], probed["conditional_writes"]) == (f"s3://{bucket}/team", True)
    assert probed["aborted_uploads"] == 1 and probed["key"] == "remote.url"

    ws.config.write_text(ws.config.read_text().replace(bucket, "no-such-bucket-here"))
    result = ws.run("serve", "--once", check=False)
    assert result.returncode == 2, result.stderr
    assert "config: remote.url:" in result.stderr and "cannot be reached" in result.stderr
    assert "testing-secret" not in result.stderr + result.stdout


def test_a_store_that_ignores_conditional_writes_is_found_at_start_and_still_tiers(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """A real S3 API server that accepts `If-None-Match: *` and ignores it (moto behind a layer
    that drops the header): the start's probe finds it out and says so (a warning in the log,
    `conditional_writes: false` in `status`), and one catalog still tiers and fetches there."""
    ignoring = S3Server(ignore_conditional_writes=True)
    try:
        ws, bucket, client = remote_workspace(tmp_path, ignoring, keras_checkpoints)
        started = ws.run("serve", "--once")
        assert "remote_conditional_writes_ignored" in started.stderr, started.stderr
        (probed,) = ws.json("status")["remotes"]
        assert (probed["url"], probed["conditional_writes"]) == (f"s3://{bucket}/team", False)
        target = ws.root / RUN / "e01-vl1.683.keras"
        original = target.read_bytes()
        (item,) = ws.json("tier", str(target))["items"]
        assert item["done"] and not target.exists(), item
        key = item["remote_url"].removeprefix(f"s3://{bucket}/")
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == original
        ws.run("trash", "purge", "--older-than", "0s")
        ws.run("fetch", str(target))
        assert target.read_bytes() == original
    finally:
        ignoring.stop()


def test_remote_trash_is_undoable_keeps_protected_copies_and_verify_remote_marks_changes(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    names = ("e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras")
    e01, e02, e03 = (ws.root / RUN / n for n in names)
    original = e01.read_bytes()
    tiered = ws.json("tier", str(e01), str(e02), str(e03))["items"]
    keys = [i["remote_url"].removeprefix(f"s3://{bucket}/") for i in tiered]
    ws.run("trash", "purge", "--older-than", "0s")  # remote-only now

    given = ws.json("trash", "remote", str(e01), str(e02), str(e03))
    assert [(i["action"], i.get("done")) for i in given["items"]] == [
        ("trash", True),
        ("trash", True),
        ("keep", None),
    ], given
    assert "newest" in given["items"][2]["reason"]
    trash_key = given["items"][0]["trash_url"].removeprefix(f"s3://{bucket}/")
    assert trash_key.startswith("team/.ckpt-trash/") and trash_key.endswith(keys[0][5:])
    assert keys[0] not in objects(client, bucket) and trash_key in objects(client, bucket)
    rows = [t for t in ws.json("trash", "list") if t.get("location") == "remote"]
    assert [(t["path"], t["remote_url"]) for t in rows] == [
        (str(e01), tiered[0]["remote_url"]),
        (str(e02), tiered[1]["remote_url"]),
    ]

    ws.run("trash", "restore", str(rows[0]["id"]))  # copied back to its key, the row verified
    assert read(s3, bucket, keys[0]) == original and trash_key not in objects(client, bucket)
    ws.run("trash", "purge", "--older-than", "0s")  # the purge job deletes e02's for good
    assert objects(client, bucket) == {keys[0], keys[2]}

    # Behind our back: e01's object overwritten, e03's removed.
    client.put_object(Bucket=bucket, Key=keys[0], Body=b"other bytes")
    client.delete_object(Bucket=bucket, Key=keys[2])
    checked = ws.run("verify", "--remote", check=False)
    assert checked.returncode == 3, checked.stderr
    assert "remote copy changed" in checked.stdout and "remote copy missing" in checked.stdout
    refused = ws.run("fetch", str(e01), "--to", str(tmp_path / "x.keras"), check=False)
    assert refused.returncode == 6 and "no verified remote copy" in refused.stderr  # never again


def objects(client: Any, bucket: str) -> set[str]:
    return {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}


def read(s3: S3Server, bucket: str, key: str) -> bytes:
    """The object's bytes (moto reports a server-side copy's composite checksum as a whole
    object's: boto3's own check of it is left to us, who compare the bytes)."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=s3.url,
        region_name="us-east-1",
        config=Config(response_checksum_validation="when_required"),
    )
    return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_two_catalogs_tiering_one_file_to_one_bucket_never_clobber(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    """Two `ckpt tier` processes of two configs and catalogs at once, one object key: the
    conditional complete keeps the first object (one version in a versioned bucket) and the
    other is told it was kept, verified, not overwritten."""
    first, bucket, client = remote_workspace(tmp_path / "a", s3, keras_checkpoints)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    second = Workspace(tmp_path / "b")
    second.config.write_text(
        second.config.read_text()
        + f"remote:\n  url: s3://{bucket}/team\n  endpoint_url: {s3.url}\n  region: us-east-1\n"
    )
    shutil.copytree(keras_checkpoints / RUN, second.root / RUN)
    second.run("scan")
    name, other = "e02-vl1.663.keras", "e01-vl1.683.keras"
    original = (first.root / RUN / name).read_bytes()
    with ThreadPoolExecutor(2) as pool:  # two processes at once, both tiering `name`
        results = list(
            pool.map(
                lambda args: args[0].run("tier", *args[1:], "--json", check=False),
                [
                    (first, str(first.root / RUN / name), str(first.root / RUN / other)),
                    (second, str(second.root / RUN / name)),
                ],
            )
        )
    done = []
    for result, ws in zip(results, (first, second), strict=True):
        if result.returncode == 0:
            done.append(json.loads(result.stdout)["items"][0])
            assert not (ws.root / RUN / name).exists()
        else:  # lost a race on one upload: a clear failure, the local copy untouched
            assert result.returncode == 3, result.stderr
            assert json.loads(result.stdout)["failures"], result.stdout
            assert (ws.root / RUN / name).read_bytes() == original
    assert done and all(d["done"] for d in done)
    key = done[0]["remote_url"].removeprefix(f"s3://{bucket}/")
    versions = client.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", [])
    assert len(versions) == 1, versions  # never overwritten
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == original

    # One after the other: the second finds the first's object, and says so.
    told = second.run("tier", str(second.root / RUN / other))
    assert "an identical object was already there: kept as it was, not overwritten" in told.stdout
    key = told.stdout.split(" -> ")[1].split()[0].removeprefix(f"s3://{bucket}/")
    assert len(client.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]) == 1


TIERING = """service:
  heartbeat: 1s
schedule:
  rescan: 0
  retention: 1s
hooks:
  - on: [tiered]
    command: [/bin/sh, -c, 'cat >> "$0"; echo >> "$0"', HOOKS]
"""
# roots[0] tiers by policy; roots[1] (same filesystem) is under disk pressure at once.
ROOTS = """    retention:
      {keep_last: 3, keep_best: {metric: val_loss}, tier_after: 0s, keep_local: {last: 1}}
  - path: GUARDED
    min_free: 99%
    filename_template: ["w.{epoch:02d}.weights.h5"]
completion:"""


def hook_documents(path: Path) -> list[dict[str, Any]]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_live_daemon_tiers_by_policy_and_best_latest_answer_from_the_store(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    guarded = tmp_path / "guarded"
    shutil.copytree(keras_checkpoints / "k3/run_weights", guarded / "k3/run_weights")
    w01, w02 = (guarded / "k3/run_weights" / f"w.0{n}.weights.h5" for n in (1, 2))
    ws, bucket, _client = remote_workspace(tmp_path, s3, keras_checkpoints, scan=False)
    hooks = tmp_path / "hooks.jsonl"
    text = ws.config.read_text().replace("completion:", ROOTS.replace("GUARDED", str(guarded)))
    ws.config.write_text(text + TIERING.replace("HOOKS", str(hooks)))
    ws.run("scan")
    names = ("e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras")
    e01, e02, e03 = (ws.root / RUN / name for name in names)
    originals = {p: p.read_bytes() for p in (e01, e02, e03)}

    (plan,) = ws.json("prune", "--dry-run", "--run", RUN)["runs"]
    decided = {d["path"]: d for d in plan["decisions"]}
    assert [decided[str(p)]["action"] for p in (e01, e02, e03)] == ["tier", "tier", "keep"]
    assert decided[str(e01)]["reasons"][0].startswith("older than tier_after 0s: tiered")
    assert "stays local (newest, keep_local last #1)" in decided[str(e03)]["reasons"]
    assert plan["tiered"] == 2 and "tier_after 0s, keep_local last 1" in plan["policy"]

    daemon = Daemon(ws)
    try:
        daemon.wait_until(lambda: len(hook_documents(hooks)) >= 3, 120, "three tiered hooks")
        events = {d["path"]: d for d in hook_documents(hooks)}
        assert {d["event"] for d in events.values()} == {"tiered"}
        assert "disk pressure" in events.pop(str(w01))["reason"] and not w01.exists()
        assert set(events) == {str(e01), str(e02)} and not e01.exists() and e03.exists()
        urls = {path: d["remote_url"] for path, d in events.items()}
        assert all(u.startswith(f"s3://{bucket}/team/") for u in urls.values())
        tiered = len(originals[e01]) + len(originals[e02])
        assert sum(d["bytes"] for d in events.values()) == tiered
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(ws.run("metrics").stdout)
            for s in family.samples
        }
        guarded_bytes = (keras_checkpoints / "k3/run_weights/w.01.weights.h5").stat().st_size
        assert samples[("ckpt_uploaded_bytes_total", ())] == tiered + guarded_bytes
        assert samples[("ckpt_tiered_total", ())] == 3
        assert samples[("ckpt_upload_failures_total", ())] == 0
        assert samples[("ckpt_remote_bytes", (("root", str(ws.root)),))] == tiered
        assert samples[("ckpt_remote_bytes", (("root", str(guarded)),))] == guarded_bytes
        store = f"s3://{bucket}/team"
        assert samples[("ckpt_remote_retries_total", (("store", store),))] == 0
    finally:
        assert daemon.stop() == 0, daemon.log

    # Under pressure the guard tiered w.01 (not its run's newest) rather than demote or trash
    # it: its local copy purged, its bytes in the store; w.02, its run's newest, untouched.
    remote = {r["path"]: r for r in ws.json("list", "--location", "remote")}
    assert remote[str(w01)]["status"] == "purged" and w02.exists()
    roots = {r["root"]: r for r in ws.json("du")["roots"]}
    root = roots[str(ws.root)]
    assert (root["remote_bytes"], root["remote_files"]) == (tiered, 2)
    assert root["bytes"] == len(originals[e03]) + tiered  # local: e03, and the two in the trash

    # The worst val_loss (e01) is only in the store: its URL, or with --fetch its local path.
    assert ws.run("best", "--metric", "val_loss", "--mode", "max").stdout.strip() == urls[str(e01)]
    fetched = ws.run("best", "--metric", "val_loss", "--mode", "max", "--fetch").stdout
    assert fetched.strip() == str(e01) and e01.read_bytes() == originals[e01]

    ws.run("tier", str(e03))  # now the newest is only in the store
    resumed = ws.json("latest", "--run", RUN, "--resumable", "--fetch")
    assert (resumed["path"], resumed["location"], resumed["resumable"]) == (str(e03), "both", True)
    assert resumed["remote_url"].endswith("/e03-vl1.643.keras")
    assert e03.read_bytes() == originals[e03]
