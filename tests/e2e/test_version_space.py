"""Issue 20, item 2, for real: our copies never take the space a trainer needs.

A real Keras 3 job (`best.h5` with save_best_only, `model.keras` each epoch, then a new
`final.keras`) on a 10 MB tmpfs in a private mount namespace, under `ckpt serve` with the
shipped config (only its root and state folder moved: no `min_free`), where every generation
kept would fill the filesystem (tests/support/version_space.py). Halfway, `ckpt prune` (the
versions' own policy) puts versions in the trash and `ckpt prune --keep-last 1 --run other`
a user's checkpoint. Then other data fills the filesystem, round after round. One job for the
module (about a minute and a half)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import version_space

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace with a tmpfs")
    out = tmp_path_factory.mktemp("version-space")
    driver = [sys.executable, version_space.__file__, "--driver", str(out)]
    driver += ["--fixtures", str(keras_checkpoints)]
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", *driver],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=Path(__file__).parents[2],
    )
    found = out / "results.json"
    assert found.exists(), done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(found.read_text())
    doc["driver"] = done.returncode, done.stdout + done.stderr
    return doc


def _largest(results: dict[str, Any]) -> int:
    return max(r["size_bytes"] for r in results["list"] if r["version_of"] is None)


def test_the_trainer_never_gets_enospc_from_our_copies(results) -> None:
    assert results["driver"][0] == 0, results["driver"][1]
    job = results["job"]
    assert job["returncode"] == 0, job["output"]
    assert "No space left" not in job["output"] and "saved final.keras" in job["output"]
    # After each epoch (its saves done, our copies made meanwhile), the trainer had room for a
    # save of its biggest file again: our copies always left the reserve free.
    largest = _largest(results)
    trainer = results["trainer"]
    assert min(trainer["free_after_epoch"]) >= largest, (trainer, largest)
    assert trainer["free_before_final"] >= largest, (trainer, largest)
    assert results["serve_returncode"] == 0, results["serve_log"][-3000:]


def test_a_capture_below_the_reserve_is_skipped_with_its_reason_and_metric(results) -> None:
    log = results["serve_log"].splitlines()
    skipped = [line for line in log if "event=capture_skipped" in line]
    assert skipped, "no capture was skipped: the filesystem was never short"
    for line in skipped:
        assert "level=warning" in line and 'reason="free ' in line, line
        assert "+ reserve" in line and "what a trainer's next save may need" in line, line
    audited = [e for e in results["log"] if e["action"] == "capture-skipped"]
    assert len(audited) == len(skipped)
    assert all(e["reason"].startswith("generation ") and e["state"] == "done" for e in audited)
    assert all(": free " in e["reason"] for e in audited)
    counter = [
        line
        for line in results["metrics"].splitlines()
        if line.startswith("ckpt_capture_skipped_total ")
    ]
    assert counter == [f"ckpt_capture_skipped_total {float(len(audited))}"], counter
    kept = [line for line in log if "event=version_kept" in line]
    assert kept and all("how=copy" in line for line in kept)  # tmpfs: no reflink, real copies


def test_our_bytes_go_first_in_the_documented_order_and_nothing_of_the_users(results) -> None:
    acts = [
        e
        for r in results["rounds"]
        for e in r["events"]
        if e["actor"] == "daemon:space-reserve" and e["state"] == "done"
    ]
    assert acts, "the service freed nothing of its own below the reserve"
    assert all(e["reason"].startswith("low free space (free ") for e in acts)

    def step(e: dict[str, Any]) -> int:
        if "a version in the trash" in e["reason"]:
            return 1
        if "an old version" in e["reason"]:
            return 2
        assert "purged from the trash early" in e["reason"], e
        return 3

    order = [step(e) for e in acts if e["action"] == "purge"]
    assert order == sorted(order), [(e["action"], e["path"]) for e in acts]
    assert {1, 3} <= set(order), order  # versions in the trash first, the other trash last
    # Step 2 in between whenever a version was kept that is no previous generation (the best
    # one, which the job makes an old generation of model.keras; unit tests cover the rest).
    status = {r["path"]: r["status"] for r in results["list"]}
    olds = [
        d
        for run in results["prune_end"]["runs"]
        for d in run["decisions"]
        if d["action"] == "keep"
        and not any("previous generation" in r for r in d["reasons"])
        and status.get(d["path"]) != "standby"  # a copy of what the file holds now: kept
    ]
    assert (2 in order) == bool(olds), (order, olds)
    # Only ours: versions and the trash; every checkpoint a trainer wrote is where it was.
    files = results["files"]
    for name in ("run/best.h5", "run/model.keras", "run/final.keras", "other/e02-vl1.663.keras"):
        assert name in files, sorted(files)
    touched = {e["path"] for e in acts}
    assert all("/.ckpt-versions/" in p or "other/e01" in p for p in touched), touched
    # The previous generation of each rewritten file is still kept.
    kept = [r for r in results["list"] if r["version_of"] and r["status"] in ("ok", "standby")]
    of = {Path(r["version_of"]).name for r in kept}
    assert {"best.h5", "model.keras"} <= of, kept
    # When nothing of ours is left, the service says so and deletes nothing of the users'.
    last = results["rounds"][-1]
    assert not last["freed"]
    assert "deleting checkpoints needs min_free" in results["serve_log"]


def test_du_counts_versions_and_their_trash_as_on_disk(results) -> None:
    files = results["files_before_rounds"]
    kept_on_disk = sum(n for p, n in files.items() if p.startswith(".ckpt-versions/"))
    trash_on_disk = sum(
        n for p, n in files.items() if p.startswith(".ckpt-trash/") and "/.ckpt-versions/" in p
    )
    assert trash_on_disk > 0, "no version in the trash: the campaign did not prune"
    (root,) = results["du"]["roots"]
    assert root["versions"]["kept_bytes"] == kept_on_disk
    assert root["versions"]["trash_bytes"] == trash_on_disk
    assert root["versions"]["bytes"] == kept_on_disk + trash_on_disk
    assert root["by_kind"]["version"] == kept_on_disk
    all_trash = sum(n for p, n in files.items() if p.startswith(".ckpt-trash/"))
    assert root["by_kind"]["trash"] == all_trash
