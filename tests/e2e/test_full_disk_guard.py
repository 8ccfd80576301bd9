"""Issue 39, item 3, for real: a plain PyTorch loop on a 40 MB filesystem (a tmpfs in a private
mount namespace), `ckpt_epochNNN.pt` + `last.pt` + `best.pt` each epoch (~24 MB for 25 epochs),
under `ckpt serve` on the bundled config with only the root and `min_free: 12MB` set, its
catalog on the same filesystem (tests/support/torch_disk_pressure.py).

Before: the kept copies of `last.pt`/`best.pt` filled the disk, the guard demoted the user's
epochs instead of freeing them (each version's split claimed one artifact name) and the loop
ended with 0 bytes free; with the catalog on a disk filled to its last byte every act began with
a catalog write that failed ("database or disk is full") and nothing was freed. Three runs for
the module: the loop alone (the control), under the service, and under the service with the
disk filled by another program (about 50 s in all on a quiet machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, rewritten_best, zip_run
from tests.support import torch_disk_pressure as bed
from tests.support.s3_server import CREDENTIALS, S3Server

pytestmark = pytest.mark.slow
MB = 1_000_000
USER_FILES = [f"runs/exp/ckpt_epoch{e:03d}.pt" for e in range(bed.EPOCHS)] + [
    "runs/exp/last.pt",
    "runs/exp/best.pt",
]


def _run(tmp_path_factory: pytest.TempPathFactory, mode: str) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace with a tmpfs")
    out = tmp_path_factory.mktemp(mode.strip("-"))
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, bed.__file__, mode, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    found = out / "results.json"
    assert found.exists(), done.stdout + done.stderr
    results: dict[str, Any] = json.loads(found.read_text())
    results["driver"] = done.returncode, done.stdout + done.stderr
    return results


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "--control")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "--driver")


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "--full")


def _acts(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The guard's acts, in the order they happened."""
    acts = [e for e in results["log"] if e["actor"] == "daemon:disk-guard"]
    return sorted(acts, key=lambda e: e["id"])


def _ours(path: str) -> bool:
    return "/.ckpt-versions/" in path


def test_the_loop_finishes_its_25_epochs_and_min_free_stays_free(control, served) -> None:
    for results in (control, served):
        assert results["driver"][0] == 0, results["driver"][1]
        assert results["job"]["returncode"] == 0, results["job"]["output"]
        assert "No space left" not in results["job"]["output"]
        assert [t["epoch"] for t in results["truth"]] == list(range(bed.EPOCHS))
    # The control: the loop alone ends with ~17 MB of its 40 MB free (the user's number).
    assert 16 * MB <= control["free_bytes"] <= 19 * MB, control["free_bytes"]
    # Under the service: never below min_free for long, and above it at the end.
    assert served["settled"], served["serve_log"][-3000:]
    assert served["free_bytes"] >= bed.MIN_FREE_MB * MB, served["free_bytes"]
    assert served["serve_returncode"] == 0, served["serve_log"][-3000:]
    assert min(t["free"] for t in served["truth"]) >= bed.MIN_FREE_MB * MB - 3 * MB


def test_no_checkpoint_of_the_users_is_demoted_or_trashed(control, served) -> None:
    """The loop alone never goes below min_free: nothing of the user's had to go."""
    for name in USER_FILES:
        assert served["files"].get(name) == control["files"][name], name
    assert not [e for e in served["log"] if e["action"] == "split"]
    touched = [e["path"] for e in _acts(served) if not _ours(e["path"])]
    assert not touched, touched


def test_our_copies_are_freed_first_and_never_take_min_free(served) -> None:
    """Since versions cost only what they save (`last.pt` is a rolling pointer, not copied;
    `best.pt` generations within `versions.budget`), the loop's copies may never come near
    min_free, and the guard then has nothing to do; whatever it did do was ours, and every
    copy refused says why (min_free or the budget)."""
    acts = _acts(served)
    for e in acts:
        assert e["state"] == "done", e
        assert e["reason"].startswith("disk pressure (free "), e
        assert "a kept copy of ours (.ckpt-versions)" in e["reason"], e
    skipped = [e for e in served["log"] if e["action"] == "capture-skipped"]
    for e in skipped:
        assert "+ min_free 12.0 MB" in e["reason"] or "versions.budget" in e["reason"], e
    assert served["free_bytes"] >= bed.MIN_FREE_MB * MB, served["free_bytes"]


def test_the_guard_frees_bytes_with_its_catalog_on_the_full_disk(full) -> None:
    assert full["driver"][0] == 0, full["driver"][1]
    assert full["filled"] > 0 and full["job"]["returncode"] == 0, full["job"]["output"]
    # The guard done (back above min_free, or all it may free freed: how much that is depends on
    # how many copies the service kept before the disk filled), the service up and answering.
    assert full["settled"], full["serve_log"][-3000:]
    (disk,) = full["status"]["disk"]
    # From 0: real bytes freed (how many depends on how many copies were kept: fewer since
    # versions cost only what they save).
    assert disk["freed_bytes"] >= 1 * MB and full["free_bytes"] >= 1 * MB, disk
    if disk["state"] != "ok":
        assert disk["state"] == "cannot free" and "protected" in disk["why"], disk
    assert full["serve_alive"] and full["serve_returncode"] == 0, full["serve_log"][-3000:]
    assert full["status"]["running"] is True, full["status"]
    assert "event=catalog_room_released" in full["freed_within"], full["freed_within"][-3000:]
    errors = [x for x in full["freed_within"].splitlines() if "event=disk_guard_error" in x]
    assert not errors, errors  # before: "database or disk is full", every second
    acts = _acts(full)
    # Every act recorded as done: the bookkeeping found its room.
    assert acts and all(e["state"] == "done" for e in acts), acts
    # Our copies first, all of them, before anything of the user's.
    order = [_ours(e["path"]) for e in acts]
    assert order == sorted(order, reverse=True), [(e["action"], e["path"]) for e in acts]
    if not all(order) or disk["state"] != "ok":  # the user's only once ours were all gone
        assert not any(_ours(p) for p in full["files"]), sorted(full["files"])
    # The newest (also the last resumable) and the best stay whole.
    newest = f"runs/exp/ckpt_epoch{bed.FULL_EPOCHS - 1:03d}.pt"
    for name in (newest, "runs/exp/last.pt", "runs/exp/best.pt"):
        assert full["files"].get(name) == full["before_fill"]["files"][name], name


def test_every_copy_we_write_checks_min_free_first(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """A split's artifact, a compressed rewrite and a restored version are copies of ours: with
    less free than their size plus `min_free` (99% here: never met) each is refused with one
    line, exit 3, nothing written; the refusal is in `ckpt log`."""
    ws = zip_run(workspace, keras_checkpoints, ("tfk/run_h5/weights.01-1.69.hdf5", "tfk.hdf5"))
    best = rewritten_best(ws, keras_checkpoints)  # its earlier generations kept (room then)
    before = {p: p.read_bytes() for p in (best, ws.root / ZIP_RUN / "tfk.hdf5")}
    ws.config.write_text(ws.config.read_text() + "min_free: 99%\n")
    h5 = str(ws.root / ZIP_RUN / "tfk.hdf5")
    for argv, what in (
        (["split", h5], "the inference artifact"),
        (["compress", h5], "the compressed copy"),
        (["restore", str(best), "--version", "1"], "the restored version"),
    ):
        done = ws.run(*argv, check=False)
        assert done.returncode == 3, (argv, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"refused: {what} " in lines[0] and " not written: free " in lines[0], lines
        assert "+ min_free " in lines[0] and "(99%)" in lines[0], lines
    assert {p: p.read_bytes() for p in before} == before
    assert not list((ws.root / ZIP_RUN).glob("*.inference.*"))
    failed = [e for e in ws.json("log") if e["state"] == "failed"]
    assert {e["action"] for e in failed} == {"split", "compress"}, failed
    assert all("+ min_free " in e["reason"] for e in failed), failed


def test_a_fetch_from_the_object_store_checks_min_free_first(
    tmp_path: Path, keras_checkpoints: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ckpt fetch` of a tiered checkpoint (its local copy purged) streams a new file: with less
    free than its size plus `min_free` it is refused with one line, nothing downloaded."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    server = S3Server()
    try:
        server.bucket("ckpt-test-guard")
        ws = zip_run(Workspace(tmp_path), keras_checkpoints)
        remote = f"remote:\n  url: s3://ckpt-test-guard/team\n  endpoint_url: {server.url}\n"
        ws.config.write_text(ws.config.read_text() + remote + "  region: us-east-1\n")
        target = ws.root / ZIP_RUN / ZIP_FILES[0]
        ws.run("tier", str(target))
        ws.run("trash", "purge", "--older-than", "0s")
        ws.config.write_text(ws.config.read_text() + "min_free: 99%\n")
        done = ws.run("fetch", str(target), check=False)
        assert done.returncode == 3, (done.stdout, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"ckpt: error: refused: the fetched copy {target} not written: ")
        assert "+ min_free " in line and "(99%)" in line, line
        assert not target.exists()
    finally:
        server.stop()
