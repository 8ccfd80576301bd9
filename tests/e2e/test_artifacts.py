"""`ckpt split` / `ckpt compress` through the CLI: the catalog knows the artifacts as ours."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from ckpt_daemon.children.sandbox import CONFINED as SANDBOXED
from tests.support import ZIP_FILES, ZIP_RUN, Workspace, zip_run

pytestmark = pytest.mark.slow
RUN, FILES = ZIP_RUN, ZIP_FILES


@pytest.fixture
def zips(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    return zip_run(workspace, keras_checkpoints, ("tfk/run_h5/weights.01-1.69.hdf5", "tfk.hdf5"))


def paths(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list")}


def test_split_registers_the_artifact_and_scans_never_index_it(zips: Workspace) -> None:
    best = zips.run("best", "--metric", "val_loss").stdout.strip()
    assert (
        zips.run("best", "--metric", "val_loss", "--artifact", "inference", check=False).returncode
        == 6
    )  # not split yet
    doc = json.loads(zips.run("split", best, "--json").stdout)
    artifact = Path(doc["artifact"])
    assert artifact.name == Path(best).name.replace(".keras", ".inference.keras")
    assert artifact.exists() and doc["bytes"] < doc["source_bytes"]
    report = zips.json("scan")
    assert report["indexed"] == [] and str(artifact) in [s["path"] for s in report["skipped"]]
    assert artifact.name not in paths(zips)
    shown = zips.json("show", best)
    card = artifact.with_name(artifact.name.replace(".keras", ".md"))  # its model card
    assert [(a["kind"], a["path"]) for a in shown["artifacts"]] == [
        ("inference", str(artifact)),
        ("card", str(card)),
    ]
    assert doc["card"] == str(card) and card.read_text().startswith("# Model card: ")
    assert [e["action"] for e in shown["events"]][-1] == "split"
    printed = zips.run("best", "--metric", "val_loss", "--artifact", "inference").stdout
    assert printed.strip() == str(artifact)
    # One JSON shape with or without --artifact; its `path` is what the text prints.
    plain = zips.json("best", "--metric", "val_loss")
    chosen = zips.json("best", "--metric", "val_loss", "--artifact", "inference")
    assert list(plain) == list(chosen) and plain["artifact"] is None
    assert plain["path"] == best and chosen["path"] == printed.strip()
    assert chosen["artifact"]["checkpoint"] == best and chosen["artifact"]["kind"] == "inference"
    assert chosen["artifact"]["path"] == str(artifact) and chosen["artifact"]["hash"]
    assert {k: v for k, v in chosen.items() if k not in ("path", "artifact")} == {
        k: v for k, v in plain.items() if k not in ("path", "artifact")
    }


def test_compress_updates_the_row_and_the_next_scan_reads_nothing(
    zips: Workspace, keras_checkpoints: Path
) -> None:
    target = zips.root / RUN / "tfk.hdf5"
    with h5py.File(target, "a") as f:  # compressible: the fixture alone would not shrink
        f.create_dataset("padding", data=np.zeros(65536, np.float32))
    zips.run("scan")
    before = paths(zips)["tfk.hdf5"]
    doc = json.loads(zips.run("compress", str(target), "--json").stdout)
    assert doc["codec"].startswith("gzip") and doc["needs"] is None
    after = paths(zips)["tfk.hdf5"]
    assert after["size_bytes"] == target.stat().st_size == doc["bytes_after"]
    assert after["hash"] == doc["hash"] != before["hash"]
    assert zips.json("scan")["indexed"] == []  # the catalog already knows the new bytes
    assert zips.json("show", str(target))["codec"] == doc["codec"]
    original = zips.base / "original.hdf5"
    shutil.copy2(keras_checkpoints / "tfk/run_h5/weights.01-1.69.hdf5", original)
    check = (  # lossless: every dataset decodes to the original's values
        "import sys, h5py, numpy as np\n"
        "a, b = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')\n"
        "names = []\n"
        "a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)\n"
        "assert all(np.array_equal(a[n][()], b[n][()]) for n in names)\n"
        "assert set(a.attrs) == set(b.attrs)\n"
        "print(len(names))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", check, str(original), str(target)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert int(out) > 10


def test_split_and_compress_refuse_tf_formats_and_changed_files(
    zips: Workspace, keras_checkpoints: Path
) -> None:
    shutil.copytree(keras_checkpoints / "k3" / "tfckpt", zips.root / "tf")
    zips.run("scan")
    refused = zips.run("split", str(zips.root / "tf" / "ckpt-2"), check=False)
    assert refused.returncode == 2 and "tf-checkpoint" in refused.stderr
    target = zips.root / RUN / FILES[0]
    with open(target, "ab") as f:
        f.write(b"x")
    changed = zips.run("compress", str(target), check=False)
    assert changed.returncode == 3 and "changed since it was indexed" in changed.stderr


def test_verify_rehashes_and_reports_silent_changes(zips: Workspace) -> None:
    zips.run("split", str(zips.root / RUN / FILES[2]))
    verdicts = json.loads(zips.run("verify", "--json").stdout)
    # 4 checkpoints + 1 artifact + its model card
    assert len(verdicts) == 6 and all(v["ok"] for v in verdicts)
    # Same size and mtime, other bytes: only a re-hash can tell.
    target = zips.root / RUN / FILES[0]
    info = target.stat()
    data = bytearray(target.read_bytes())
    data[-200] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    result = zips.run("verify", "--json", check=False)
    assert result.returncode == 3
    bad = [v for v in json.loads(result.stdout) if not v["ok"]]
    assert [(Path(v["path"]).name, v["detail"].split(":")[0]) for v in bad] == [
        (FILES[0], "bytes changed since indexed (hash differs, same size and mtime)")
    ]
    marked = {r["path"]: r["status"] for r in json.loads(zips.run("list", "--json").stdout)}
    assert marked[str(target)] == "corrupt"  # so best, latest and retention no longer take it


def test_verify_load_checks_the_artifact_predicts_like_the_checkpoint(zips: Workspace) -> None:
    target = zips.root / RUN / FILES[1]
    zips.run("split", str(target))
    zips.run("split", str(zips.root / RUN / "tfk.hdf5"))  # a Keras 2 file: loaded by tf-keras
    verdicts = json.loads(
        zips.run(
            "verify", "--load", "--json", str(target), str(zips.root / RUN / "tfk.hdf5")
        ).stdout
    )
    loads = [v["detail"] for v in verdicts if v["detail"].startswith("loads")]
    assert loads == [
        f"loads with keras ({SANDBOXED}); inference artifact predicts identically",
        f"loads with tf_keras ({SANDBOXED}); inference artifact predicts identically",
    ]
