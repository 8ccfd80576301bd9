"""Issue 8, the live service: indexing never queues behind slow jobs, stop means stop, a file
name that is not UTF-8 does not break the worker. A real `ckpt serve` subprocess each time."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Daemon, Workspace, service_workspace

pytestmark = pytest.mark.slow
LEGACY = Path("k3") / "legacy" / "full.h5"


def big_legacy_checkpoint(fixtures: Path, path: Path, megabytes: int) -> None:
    """A Keras legacy HDF5 checkpoint (the real `full.h5`) grown by one large weight, of
    compressible values (two decimals), so that compressing it takes a while."""
    import h5py
    import numpy as np

    shutil.copyfile(fixtures / LEGACY, path)
    with h5py.File(path, "r+") as f:
        layer = f["model_weights/fc1"]
        values = np.round(np.random.default_rng(0).normal(size=megabytes << 18), 2)
        layer["fc1"].create_dataset("big", data=values.astype("float32").reshape(-1, 1024))
        names = [n if isinstance(n, bytes) else n.encode() for n in layer.attrs["weight_names"]]
        layer.attrs["weight_names"] = np.array([*names, b"fc1/big"], dtype="S")
    old = time.time() - 3600  # cold: due for the artifacts job at once
    os.utime(path, (old, old))


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Path:
    """One 640 MB legacy checkpoint for the module (seconds of CPU to make): each test links it
    into its root. Compress replaces the name with a new file, never writes into this one."""
    path = tmp_path_factory.mktemp("big") / "big.h5"
    big_legacy_checkpoint(keras_checkpoints, path, 640)
    return path


def place_big(big_checkpoint: Path, path: Path) -> None:
    try:
        os.link(big_checkpoint, path)
    except OSError:  # another filesystem
        shutil.copy2(big_checkpoint, path)


def listed(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["path"]: r for r in ws.json("list")}


def compress_temp(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".ckpt-tmp-")]


def schedule(ws: Workspace, extra: str, **every: str) -> None:
    lines = "".join(f"  {name}: {value}\n" for name, value in every.items())
    text = ws.config.read_text()
    ws.config.write_text(text.replace("  rescan: 0\n", f"  rescan: 0\n{lines}") + extra)


def test_indexing_goes_on_while_the_artifacts_job_compresses(
    tmp_path: Path, keras_checkpoints: Path, big_checkpoint: Path
) -> None:
    ws = service_workspace(tmp_path)
    schedule(ws, "artifacts: {compress_after: 1s}\n", artifacts="1s", verify="0", purge="0")
    big_run = ws.root / "big"
    big_run.mkdir()
    # Big enough that its compress outlasts the 4 s below by a wide margin even on an idle
    # machine (160 MB once finished in under 4 s there): the SIGTERM must land mid-compress.
    place_big(big_checkpoint, big_run / "big.h5")
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready", timeout=120)
    daemon.wait_until(lambda: compress_temp(big_run), 120, "the compress to start")
    fresh = ws.root / "fresh"
    fresh.mkdir()
    for n in range(3):
        path = fresh / f"weights.{n + 1:02d}-0.5{n}.hdf5"
        shutil.copyfile(keras_checkpoints / LEGACY, path)
        daemon.wait_until(
            lambda p=path: listed(ws).get(str(p), {}).get("status") == "ok", 60, f"{path.name}"
        )
        assert compress_temp(big_run), f"the compress ended before {path.name} was listed"
    # Stopped mid-compress (not waited for: 640 MB of gzip is ~40 s of CPU here): a SIGTERM
    # then is the next test's subject; this one only needed indexing to go on meanwhile.
    assert daemon.stop() == 0, daemon.log


def test_after_sigterm_no_retention_or_purge_starts(
    tmp_path: Path, keras_checkpoints: Path, big_checkpoint: Path
) -> None:
    ws = service_workspace(tmp_path)
    schedule(
        ws,
        "artifacts: {compress_after: 1s}\nretention: {keep_last: 1}\ntrash: {purge_after: 0s}\n",
        artifacts="1s",
        retention="2s",
        purge="2s",
        verify="0",
    )
    run = ws.root / ZIP_RUN
    run.mkdir(parents=True)
    for name in ZIP_FILES:
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, run / name)
    # One checkpoint already in the trash, for the purge job to delete.
    other = ws.root / "other"
    other.mkdir()
    for name in ZIP_FILES[:2]:
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, other / name)
    ws.run("scan")
    ws.run("prune", "--run", "other", "--keep-last", "1")
    big_run = ws.root / "big"
    big_run.mkdir()
    # Big enough that its compress outlasts the 4 s below by a wide margin even on an idle
    # machine (160 MB once finished in under 4 s there): the SIGTERM must land mid-compress.
    place_big(big_checkpoint, big_run / "big.h5")
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready", timeout=120)
    daemon.wait_until(lambda: compress_temp(big_run), 120, "the compress to start")
    time.sleep(4)  # retention and purge fall due (twice) while the compress runs
    assert compress_temp(big_run), "the compress ended too soon for this test"
    sent = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=120) == 0, daemon.log
    late = [
        e
        for e in ws.json("log", "--limit", "1000")
        if e["action"] in ("trash", "purge") and e["at"][:19] >= sent
    ]
    assert late == [], late
    assert all(listed(ws)[str(run / name)]["status"] == "ok" for name in ZIP_FILES)


def test_a_file_name_that_is_not_utf8_leaves_the_worker_running(
    daemon_ws: Any, keras_checkpoints: Path
) -> None:
    ws, daemon = daemon_ws
    run = ws.root / "exp"
    run.mkdir()
    bad = os.path.join(os.fsencode(run), b"bad\xff.h5")
    with open(bad, "wb") as f:
        f.write((keras_checkpoints / LEGACY).read_bytes())
    odd_run = os.path.join(os.fsencode(ws.root), b"run\xfe")  # a run folder named so
    os.mkdir(odd_run)
    with open(os.path.join(odd_run, b"w.h5"), "wb") as f:
        f.write((keras_checkpoints / LEGACY).read_bytes())

    def odd_rows() -> list[dict[str, Any]]:
        return [r for r in listed(ws).values() if "bad" in r["path"] or "run\\xfe" in r["path"]]

    # The hints for them handled (settle 1 s): both rows there, whatever they say.
    daemon.wait_until(lambda: len(odd_rows()) == 2, 60, "the two odd names' rows")
    good = run / "good.h5"
    shutil.copyfile(keras_checkpoints / LEGACY, good)
    daemon.wait_until(lambda: str(good) in listed(ws), 60, "the good checkpoint")
    rows = listed(ws)
    odd = [r for r in rows.values() if "bad" in r["path"] or "run\\xfe" in r["path"]]
    assert len(odd) == 2, rows
    assert all(r["status"] == "unreadable" and "UTF-8" in r["reason"] for r in odd), odd
    assert "worker_error" not in daemon.log and "UnicodeEncodeError" not in daemon.log
    assert daemon.proc.poll() is None
