"""Checkpoints of several files in the object store, through the CLI against a real S3 API
server on loopback (moto's server mode): a real TF checkpoint (`prefix.index` + data shard,
written by TensorFlow in a child), a real Hugging Face Trainer `checkpoint-N/` folder (written
by transformers in a child), a SavedModel (nested `variables/`), a torch DCP and an Orbax step
folder (the session's fixtures) each tier as ONE deterministic tar object
(`<hash16>/<name>.tar`), streamed from the files; the local copy goes to the trash only after
the copy verified; `ckpt fetch` unpacks it back byte for byte (every member compared with a copy
taken before); a second tier of the same bytes keeps the identical object; the remote trash
moves and restores the tar; a tar swapped behind our back is refused by fetch and marked by
`ckpt verify --remote`."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.s3_server import CREDENTIALS, S3Server
from tests.support.workspace import Workspace

_buckets = iter(range(10_000))


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


def workspace(tmp_path: Path, s3: S3Server, copies: dict[str, Path]) -> tuple[Workspace, str, Any]:
    bucket = f"ckpt-folders-{next(_buckets)}"
    client = s3.bucket(bucket)
    ws = Workspace(tmp_path)
    ws.config.write_text(
        ws.config.read_text()
        + f"remote:\n  url: s3://{bucket}/team\n  endpoint_url: {s3.url}\n  region: us-east-1\n"
    )
    for where, source in copies.items():
        shutil.copytree(source, ws.root / where)
    ws.run("scan")
    return ws, bucket, client


def row_of(ws: Workspace, path: Path) -> dict[str, Any]:
    (row,) = [r for r in ws.json("list", "--all") if r["path"] == str(path)]
    return row


def snapshot(files: list[Path]) -> dict[Path, bytes]:
    return {f: f.read_bytes() for f in files}


def object_bytes(client: Any, bucket: str, key: str) -> bytes:
    return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def tiered_key(ws: Workspace, bucket: str, path: Path) -> str:
    done = ws.json("tier", str(path))
    (item,) = done["items"]
    assert item["done"] is True and not done["failures"], done
    return str(item["remote_url"]).removeprefix(f"s3://{bucket}/")


def test_a_tf_checkpoint_tiers_as_one_tar_and_comes_back_byte_identical(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = workspace(tmp_path, s3, {"tf": keras_checkpoints / "k3" / "tfckpt"})
    prefix = ws.root / "tf" / "ckpt-1"
    members = [ws.root / "tf" / "ckpt-1.index", ws.root / "tf" / "ckpt-1.data-00000-of-00001"]
    before = snapshot(members)
    mtimes = {m: m.stat().st_mtime_ns for m in members}
    row = row_of(ws, prefix)
    assert (row["format"], row["location"]) == ("tf-checkpoint", "local")

    key = tiered_key(ws, bucket, prefix)
    assert key.startswith("team/runs/tf/") and key.endswith(f"/{row['hash'][7:23]}/ckpt-1.tar")
    assert not any(m.exists() for m in members)  # in the local trash, after the copy verified
    assert (ws.root / "tf" / "ckpt-2.index").exists()  # the other checkpoint untouched
    head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["Metadata"]["ckpt-hash"] == row["hash"] and head["ChecksumSHA256"]
    with tarfile.open(fileobj=io.BytesIO(object_bytes(client, bucket, key)), mode="r:") as tar:
        names = tar.getnames()
        assert names == ["ckpt-1.index", "ckpt-1.data-00000-of-00001"]  # the catalog's order
        for m in members:
            extracted = tar.extractfile(m.name)
            assert extracted is not None and extracted.read() == before[m]
    assert (
        head["ContentLength"]
        == 512 * 2 + sum(-(-len(b) // 512) * 512 for b in before.values()) + 1024
    )

    ws.run("trash", "purge", "--older-than", "0s")  # remote only: fetch must stream it
    assert row_of(ws, prefix)["status"] == "purged"
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(prefix)
    assert snapshot(members) == before
    assert {m: m.stat().st_mtime_ns for m in members} == {m: max(mtimes.values()) for m in members}
    back = row_of(ws, prefix)
    assert (back["status"], back["location"], back["hash"]) == ("ok", "both", row["hash"])
    rescan = ws.json("scan")
    assert rescan["indexed"] == [] and not rescan["failed"], rescan  # the indexed identity
    assert not [p for p in (ws.root / "tf").iterdir() if p.name.startswith(".ckpt-tmp")]

    # Tiered again (the same bytes): the same key, the identical object kept, not rewritten.
    etag = head["ETag"]
    again = ws.json("tier", str(prefix))["items"][0]
    assert again["done"] is True and again["kept_existing"] is True, again
    assert again["remote_url"] == f"s3://{bucket}/{key}"
    assert client.head_object(Bucket=bucket, Key=key)["ETag"] == etag
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")

    # The remote trash moves the tar (server-side) and its restore brings it back, verified.
    ws.run("trash", "purge", "--older-than", "0s")
    (given,) = ws.json("trash", "remote", str(prefix))["items"]
    assert (given["action"], given.get("done")) == ("trash", True), given
    trash_key = given["trash_url"].removeprefix(f"s3://{bucket}/")
    assert trash_key.endswith("/ckpt-1.tar") and objects(client, bucket) == {trash_key}
    (listed,) = [t for t in ws.json("trash", "list") if t.get("location") == "remote"]
    ws.run("trash", "restore", str(listed["id"]))
    assert objects(client, bucket) == {key}
    assert "remote copy matches" in ws.run("verify", "--remote", str(prefix)).stdout
    for m in members:
        m.unlink(missing_ok=True)
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(prefix)
    assert snapshot(members) == before


def objects(client: Any, bucket: str) -> set[str]:
    return {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_a_savedmodel_with_a_nested_folder_comes_back_whole_in_one_rename(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    ws, bucket, client = workspace(tmp_path, s3, {"sm": keras_checkpoints / "k3" / "export"})
    folder = ws.root / "sm" / "sm"
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert Path("variables/variables.index") in before
    row = row_of(ws, folder)
    assert row["format"] == "savedmodel"
    key = tiered_key(ws, bucket, folder)
    assert key.endswith("/sm.tar") and not folder.exists()
    with tarfile.open(fileobj=io.BytesIO(object_bytes(client, bucket, key)), mode="r:") as tar:
        kinds = {m.name: m.type for m in tar.getmembers()}
    assert kinds["sm"] == kinds["sm/variables"] == tarfile.DIRTYPE
    assert {n for n, t in kinds.items() if t == tarfile.REGTYPE} == {f"sm/{p}" for p in before}
    ws.run("trash", "purge", "--older-than", "0s")
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(folder)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in folder.parent.iterdir() if p.name != "sm"]  # no temp left
    rescan = ws.json("scan")
    assert rescan["indexed"] == [] and not rescan["failed"], rescan


def test_an_hf_folder_tiers_fetches_and_a_swapped_tar_is_refused_and_marked(
    tmp_path: Path, s3: S3Server, hf_runs: Path
) -> None:
    ws, bucket, client = workspace(tmp_path, s3, {"hf": hf_runs / "trainer"})
    folder = ws.root / "hf" / "out" / "checkpoint-4"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    before = {p.relative_to(folder): b for p, b in snapshot(files).items()}
    row = row_of(ws, folder)
    assert row["format"] == "hf-folder"

    key = tiered_key(ws, bucket, folder)
    assert key.endswith("/checkpoint-4.tar")
    assert not folder.exists() and (ws.root / "hf" / "out" / "checkpoint-6").is_dir()
    trashed = row_of(ws, folder)
    assert (trashed["status"], trashed["location"]) == ("trashed", "remote")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fetched = ws.run("fetch", str(row["id"]), "--to", str(elsewhere)).stdout.strip()
    assert fetched == str(elsewhere / "checkpoint-4")
    got = {
        p.relative_to(elsewhere / "checkpoint-4"): p.read_bytes()
        for p in (elsewhere / "checkpoint-4").rglob("*")
        if p.is_file()
    }
    assert got == before
    # Again: what is there is the same bytes, kept as it is (a retry is idempotent); a member
    # with other bytes is never replaced.
    again = ws.run("fetch", str(row["id"]), "--to", str(elsewhere)).stdout.strip()
    assert again == str(elsewhere / "checkpoint-4")
    edited = next(p for p in sorted((elsewhere / "checkpoint-4").rglob("*")) if p.is_file())
    edited.write_bytes(b"edited by hand")
    refused = ws.run("fetch", str(row["id"]), "--to", str(elsewhere), check=False)
    assert refused.returncode == 2 and "never replaced" in refused.stderr
    assert edited.read_bytes() == b"edited by hand"

    # From the store to its own path (the local trash purged): one rename of the whole folder.
    ws.run("trash", "purge", "--older-than", "0s")
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(folder)
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == (
        before
    )
    assert row_of(ws, folder)["status"] == "ok"
    rescan = ws.json("scan")
    assert rescan["indexed"] == [] and not rescan["failed"], rescan
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".ckpt-tmp")]
    assert tiered_key(ws, bucket, folder) == key  # the same bytes: the same key

    # Behind our back: another tar under the key (one member's byte flipped, our metadata kept).
    forged = bytearray(object_bytes(client, bucket, key))
    forged[len(forged) // 2] ^= 0xFF
    client.put_object(
        Bucket=bucket, Key=key, Body=bytes(forged), Metadata={"ckpt-hash": row["hash"]}
    )
    other = tmp_path / "other"
    other.mkdir()
    refused = ws.run("fetch", str(row["id"]), "--to", str(other), check=False)
    assert refused.returncode == 3 and "hash" in refused.stderr, refused.stderr
    assert list(other.iterdir()) == []  # no temp left, nothing published
    checked = ws.run("verify", "--remote", check=False)
    assert checked.returncode == 3 and "remote copy changed" in checked.stdout, checked.stdout
    never = ws.run("fetch", str(row["id"]), "--to", str(other), check=False)
    assert never.returncode == 6 and "no verified remote copy" in never.stderr


@pytest.mark.parametrize(
    ("run", "step", "fmt", "some"),
    [
        ("dcp", "step-7", "torch-dcp", {".metadata", "__0_0.distcp"}),
        ("orbax-sync", "2", "orbax-step", {"_CHECKPOINT_METADATA", "default/_METADATA"}),
    ],
)
def test_dcp_and_orbax_folders_round_trip_through_one_tar(
    tmp_path: Path, s3: S3Server, async_saves: Path, run: str, step: str, fmt: str, some: set[str]
) -> None:
    """A real `dcp.save` folder (`.metadata` written last, a `__0_0.distcp`) and a real Orbax
    step folder (nested items, OCDBT files): the tar holds every file, and the folder fetched
    back is the same bytes, indexed as it was (the rescan reads nothing: every member carries
    the indexed mtime, so no completeness check sees a member older than another)."""
    ws, bucket, client = workspace(tmp_path, s3, {run: async_saves / run})
    folder = ws.root / run / step
    before = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    assert some <= set(before)
    row = row_of(ws, folder)
    assert (row["format"], row["status"]) == (fmt, "ok")
    key = tiered_key(ws, bucket, folder)
    assert key.endswith(f"/{step}.tar") and not folder.exists()
    with tarfile.open(fileobj=io.BytesIO(object_bytes(client, bucket, key)), mode="r:") as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
    assert files == {f"{step}/{name}" for name in before}
    ws.run("trash", "purge", "--older-than", "0s")
    assert ws.run("fetch", str(row["id"])).stdout.strip() == str(folder)
    after = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    assert after == before
    rescan = ws.json("scan")
    assert rescan["indexed"] == [] and not rescan["failed"], rescan
    assert row_of(ws, folder)["status"] == "ok"


SHARDS = """
import json, sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

folder, shards, mib = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
folder.mkdir(parents=True)
weight_map = {}
for i in range(shards):
    name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
    values = np.random.default_rng(i).standard_normal((mib << 18,), np.float32)
    save_file({f"w{i}": values}, str(folder / name))
    weight_map[f"w{i}"] = name
(folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
(folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
"""


def sharded_folder(folder: Path, shards: int, mib: int) -> None:
    """A `save_pretrained` folder of `shards` safetensors shards of `mib` MiB each, written by
    the safetensors library in a child: the test process never imports it (test_torch_readers
    checks that the pytest worker has neither torch nor safetensors in sys.modules)."""
    import subprocess
    import sys

    args = [sys.executable, "-c", SHARDS, str(folder), str(shards), str(mib)]
    subprocess.run(args, check=True)


def test_a_folder_tier_killed_mid_upload_resumes_the_same_tar_parts(
    tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of `ckpt tier` once the service stored one part of the folder's tar and holds
    the others: nothing under the key, the folder where it was; the next `ckpt tier` streams
    the same tar again, keeps the stored part (same size and MD5) and completes."""
    import signal
    import subprocess
    import sys
    import threading

    from moto.s3.models import S3Backend

    source = tmp_path / "src" / "model"
    sharded_folder(source, 3, 5)
    ws, bucket, client = workspace(tmp_path, s3, {"hf": source.parent})
    folder = ws.root / "hf" / "model"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert row_of(ws, folder)["format"] == "hf-folder"

    original = S3Backend.upload_part
    first_stored, release, opened = threading.Event(), threading.Event(), threading.Event()
    calls = []

    def gated(self: Any, bucket_name: str, multipart_id: str, part_id: int, value: bytes) -> Any:
        if bucket_name != bucket or opened.is_set():
            return original(self, bucket_name, multipart_id, part_id, value)
        calls.append(part_id)
        if len(calls) == 1:
            stored = original(self, bucket_name, multipart_id, part_id, value)
            first_stored.set()
            return stored
        release.wait(60)  # held until the kill; then, as the client is gone, never stored
        raise ConnectionResetError("the client is gone")

    monkeypatch.setattr(S3Backend, "upload_part", gated)
    cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "tier", str(folder)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert first_stored.wait(120), "no part reached the service"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert folder.is_dir() and client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    (left,) = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert left["Key"].endswith("/model.tar")
    kept = client.list_parts(Bucket=bucket, Key=left["Key"], UploadId=left["UploadId"])["Parts"]
    assert [p["PartNumber"] for p in kept] == [calls[0]]  # the one part the service stored
    opened.set()

    again = ws.json("tier", str(folder))["items"][0]
    assert again["done"] is True and again["resumed_parts"] >= 1, again
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert not folder.exists()
    ws.run("trash", "purge", "--older-than", "0s")
    ws.run("fetch", str(folder))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
