"""Issue 8, the rewrite paths: split and compress keep what the checkpoint is (its mtime, its
place in the run), never lose a trainer's save, never replace a file they did not create, mark
their outputs as theirs, stay bounded on hostile files, and clean up after killed commands.

Everything runs through the CLI (`Workspace.run`, a subprocess) on real Keras checkpoints from
the session fixtures, or on small HDF5 files built with h5py for the hostile cases.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.support import Workspace
from tests.support.hostile_files import deep_chain, keras_looking_h5

HOUR_NS = 3600 * 10**9
TFK_EPOCHS = ("weights.01-1.69.hdf5", "weights.02-1.68.hdf5")

CKPT = [sys.executable, "-m", "ckpt_daemon"]


def padded_checkpoint(
    keras_checkpoints: Path, target: Path, *, epoch_of: str = TFK_EPOCHS[0]
) -> Path:
    """A real tf-keras full checkpoint plus 256 KiB of zeros at its root: compress shrinks it
    (the fixtures alone are too small to shrink), and Keras and our readers still read it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(keras_checkpoints / "tfk/run_h5" / epoch_of, target)
    with h5py.File(target, "a") as f:
        f.create_dataset("ckpt_test_padding", data=np.zeros(65536, np.float32))
    return target


def four_epochs(ws: Workspace, keras_checkpoints: Path) -> list[Path]:
    """`exp/weights.0{1..4}-*.hdf5`, written an hour apart (epoch 4 newest), scanned."""
    run = ws.root / "exp"
    files = []
    base = time.time_ns() - 10 * HOUR_NS
    for epoch in range(1, 5):
        path = padded_checkpoint(
            keras_checkpoints, run / f"weights.{epoch:02d}-1.{70 - epoch}.hdf5"
        )
        os.utime(path, ns=(base + epoch * HOUR_NS, base + epoch * HOUR_NS))
        files.append(path)
    ws.run("scan")
    return files


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in ws.json("list")}


# ---- item 1: a rewrite keeps the mtime; retention orders by epoch/step, then mtime ----------


def test_compressing_an_old_epoch_does_not_make_it_the_newest(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    files = four_epochs(workspace, keras_checkpoints)
    before = {p: p.stat() for p in files}
    doc = workspace.json("compress", str(files[0]))
    assert doc["bytes_after"] < doc["bytes_before"] and doc["skipped"] is None
    after = files[0].stat()
    assert after.st_ino != before[files[0]].st_ino  # really rewritten
    assert after.st_mtime_ns == before[files[0]].st_mtime_ns
    assert rows(workspace)[files[0].name]["mtime"] == workspace.json("show", str(files[0]))["mtime"]
    report = workspace.json("prune", "--keep-last", "1")
    kept = {
        Path(d["path"]).name: d["reasons"]
        for r in report["runs"]
        for d in r["decisions"]
        if d["action"] == "keep"
    }
    assert list(kept) == [files[3].name] and "newest" in kept[files[3].name], report
    assert files[3].exists() and not files[0].exists()


def test_split_keeps_the_checkpoint_mtime_and_gives_it_to_the_artifact(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    files = four_epochs(workspace, keras_checkpoints)
    before = files[1].stat()
    doc = workspace.json("split", str(files[1]))
    artifact = Path(doc["artifact"])
    assert files[1].stat().st_mtime_ns == before.st_mtime_ns
    assert artifact.stat().st_mtime_ns == before.st_mtime_ns  # never "newer" than its source
    assert oct(artifact.stat().st_mode) == oct(before.st_mode)


def test_retention_ranks_by_epoch_even_when_an_old_epoch_was_touched_last(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """A file rewritten by an older ckpt (or touched by a user) is newest by mtime only: the
    furthest epoch stays "newest" and keeps the keep_last slot; the last written one is kept
    too (conservative), the epochs between go."""
    files = four_epochs(workspace, keras_checkpoints)
    os.utime(files[0])  # epoch 1 now has the newest mtime
    workspace.run("scan")
    report = workspace.json("prune", "--keep-last", "1")
    decisions = {Path(d["path"]).name: d for r in report["runs"] for d in r["decisions"]}
    assert decisions[files[3].name]["reasons"] == ["newest", "last #1"]
    assert decisions[files[0].name]["reasons"] == ["newest mtime"]
    assert [decisions[f.name]["action"] for f in files] == ["keep", "trash", "trash", "keep"]
    assert files[3].exists() and files[0].exists() and not files[1].exists()


# ---- item 21: a compress that would not shrink leaves the file alone, once --------------------


def test_compress_that_would_not_shrink_leaves_the_file_and_is_not_retried(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    run = workspace.root / "small"
    run.mkdir()
    target = run / "e01-vl1.683.keras"
    shutil.copy2(keras_checkpoints / "k3/run_zip" / target.name, target)
    workspace.run("scan")
    before, data = target.stat(), target.read_bytes()
    doc = workspace.json("compress", str(target))
    assert doc["skipped"].startswith("would not shrink: ") and doc["skipped"].endswith(" bytes")
    assert doc["bytes_after"] == doc["bytes_before"] == len(data)
    assert target.read_bytes() == data and target.stat().st_ino == before.st_ino
    shown = workspace.json("show", str(target))
    assert shown["hash"] == doc["hash"] and shown["size_bytes"] == len(data)
    assert [(a["kind"], a["codec"]) for a in shown["artifacts"]] == [
        ("compressed", f"not smaller: {doc['codec']}")
    ]
    text = workspace.run("compress", str(target)).stdout
    assert "left as it is: would not shrink" in text
    # The service's artifacts job (compress everything older than 0s) does not try it again.
    with workspace.config.open("a") as f:
        f.write("artifacts:\n  compress_after: 0s\n")
    events_before = len(workspace.json("log"))
    workspace.run("serve", "--once")
    assert [e["action"] for e in workspace.json("log")[events_before:]] == []
    assert target.read_bytes() == data


# ---- item 4: split never replaces a file it did not create ------------------------------------


def zip_epochs(ws: Workspace, fixtures: Path, run: str) -> list[Path]:
    folder = ws.root / run
    folder.mkdir(parents=True)
    names = ("e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras")
    for name in names:
        shutil.copy2(fixtures / "k3/run_zip" / name, folder / name)
    return [folder / name for name in names]


def test_split_refuses_to_replace_a_users_file_or_another_checkpoints_artifact(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    first = zip_epochs(workspace, keras_checkpoints, "a")
    other = zip_epochs(workspace, keras_checkpoints, "b")
    users = first[2].with_name("e03-vl1.643.inference.keras")  # the user's own checkpoint
    shutil.copyfile(first[0], users)
    theirs_bytes = users.read_bytes()
    workspace.run("scan")
    refused = workspace.run("split", str(first[2]), check=False)
    assert refused.returncode == 2, refused.stderr
    assert str(users) in refused.stderr and refused.stderr.count("\n") == 1
    assert users.read_bytes() == theirs_bytes
    assert workspace.json("show", str(first[2]))["artifacts"] == []
    # --out: checkpoints of two runs with the same name would write the same artifact name.
    exports = workspace.root / "exports"
    exports.mkdir()
    mine = Path(workspace.json("split", str(first[0]), "--out", str(exports))["artifact"])
    theirs = workspace.run("split", str(other[0]), "--out", str(exports), check=False)
    assert theirs.returncode == 2 and str(mine) in theirs.stderr
    shown = workspace.json("show", str(first[0]))["artifacts"]
    assert [a["path"] for a in shown if a["kind"] == "inference"] == [str(mine)]
    assert workspace.json("show", str(other[0]))["artifacts"] == []
    # Its own registered artifact is rewritten; once changed by someone, it is not ours anymore.
    again = workspace.json("split", str(first[0]), "--out", str(exports))
    assert again["artifact"] == str(mine) and again["hash"] == mine_hash(workspace, first[0])
    with mine.open("ab") as f:
        f.write(b"edited")
    edited = workspace.run("split", str(first[0]), "--out", str(exports), check=False)
    assert edited.returncode == 2 and mine.read_bytes().endswith(b"edited")


def mine_hash(ws: Workspace, checkpoint: Path) -> str:
    return str(ws.json("show", str(checkpoint))["artifacts"][0]["hash"])


# ---- item 5: our outputs are ours from the moment they exist ----------------------------------


def test_a_marked_artifact_copied_into_a_run_is_never_a_checkpoint(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    files = zip_epochs(workspace, keras_checkpoints, "run")
    h5 = padded_checkpoint(keras_checkpoints, workspace.root / "legacy/weights.01-1.69.hdf5")
    workspace.run("scan")
    keras_artifact = Path(workspace.json("split", str(files[2]))["artifact"])
    h5_artifact = Path(workspace.json("split", str(h5))["artifact"])
    # An artifact given a checkpoint's name (epoch 9: it would be the run's newest), and one
    # whose catalog row was lost (as after a kill between the rename and the catalog update).
    impostor = files[0].with_name("e09-vl0.100.keras")
    shutil.copy2(keras_artifact, impostor)
    h5_impostor = h5.with_name("weights.09-0.10.hdf5")
    shutil.copy2(h5_artifact, h5_impostor)
    catalog = workspace.base / "state" / "catalog.db"
    subprocess.run(
        ["sqlite3", str(catalog), f"DELETE FROM artifacts WHERE path = '{keras_artifact}'"],
        check=True,
    )
    report = workspace.json("scan")
    assert report["indexed"] == []
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    for path, parent in ((impostor, files[2]), (keras_artifact, files[2]), (h5_impostor, h5)):
        assert skipped[str(path)] == f"an artifact ckpt derived from {parent}", skipped
    listed = {Path(r["path"]).name for r in workspace.json("list")}
    assert listed == {f.name for f in files} | {h5.name}
    artifacts = workspace.json("show", str(files[2]))["artifacts"]
    shown = [a["path"] for a in artifacts if a["kind"] != "card"]  # the split's card aside
    assert sorted(shown) == sorted([str(keras_artifact), str(impostor)])
    workspace.run("prune", "--run", "run", "--keep-last", "1")
    assert files[2].exists() and not files[0].exists() and impostor.exists()


def test_the_artifact_is_registered_before_it_gets_its_name(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """Sampled while a split of a big checkpoint runs: the catalog lists the artifact (pending)
    before its file exists, and never is the file there without its row."""
    import sqlite3

    source = workspace.root / "big" / "weights.01-1.69.hdf5"
    source.parent.mkdir()
    shutil.copyfile(keras_checkpoints / "tfk/run_h5" / TFK_EPOCHS[0], source)
    with h5py.File(source, "a") as f:  # ~200 MB to copy and verify: the split takes a while
        f.create_dataset("optimizer_weights/padding", data=np.ones(50 << 20, np.float32))
    workspace.run("scan")
    final = source.with_name("weights.01-1.69.inference.hdf5")
    split = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ckpt_daemon",
            "--config",
            str(workspace.config),
            "split",
            str(source),
        ],
        cwd=workspace.base,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[tuple[bool, bool]] = set()
    catalog = workspace.base / "state" / "catalog.db"
    deadline = time.monotonic() + 120
    while split.poll() is None and time.monotonic() < deadline:
        with sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=30) as db:
            row = db.execute("SELECT 1 FROM artifacts WHERE path = ?", (str(final),)).fetchone()
        seen.add((row is not None, final.exists()))
        time.sleep(0.005)
    _out, err = split.communicate(timeout=120)
    assert split.returncode == 0, err
    assert (True, False) in seen, seen  # pending: registered, not there yet
    assert (False, True) not in seen, seen  # never there unregistered
    assert workspace.json("show", str(source))["artifacts"][0]["hash"] is not None


# ---- item 3: compress never replaces a trainer's save ----------------------------------------

TRAINER = """
import sys
with open(sys.argv[1], "r+b") as f:  # open for writing, as a trainer about to save in place
    print("open", flush=True)
    sys.stdin.readline()
    with open(sys.argv[2], "rb") as new:
        f.write(new.read())  # the new weights of this save
    f.truncate()
print("saved", flush=True)
"""


def test_compress_refuses_a_file_open_for_writing_and_the_save_survives(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    target = padded_checkpoint(keras_checkpoints, workspace.root / "exp/weights.01-1.69.hdf5")
    new = padded_checkpoint(keras_checkpoints, workspace.base / "new.hdf5", epoch_of=TFK_EPOCHS[1])
    workspace.run("scan")
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(target), str(new)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert trainer.stdout is not None and trainer.stdin is not None
    try:
        assert trainer.stdout.readline() == "open\n"
        refused = workspace.run("compress", str(target), check=False)
        trainer.stdin.write("save\n")
        trainer.stdin.flush()
        assert trainer.stdout.readline() == "saved\n"
    finally:
        trainer.stdin.close()
        trainer.wait(timeout=60)
        trainer.stdout.close()
    assert refused.returncode == 3, refused.stderr
    assert f"open for writing by pid {trainer.pid}" in refused.stderr
    assert target.read_bytes() == new.read_bytes()  # the trainer's save holds the name
    assert not list(target.parent.glob(".ckpt-tmp-*"))


WRITER = """
import shutil, sys, time
time.sleep(float(sys.argv[3]))
shutil.copyfile(sys.argv[1], sys.argv[2])   # a save in place, at the final name
"""


def test_a_save_racing_compress_is_never_replaced_by_the_old_weights(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """A real writer saves new weights at the final name at spread-out moments while
    `ckpt compress` runs: afterwards the name holds the writer's bytes, every time."""
    target = workspace.root / "exp/weights.01-1.69.hdf5"
    old = padded_checkpoint(keras_checkpoints, workspace.base / "old.hdf5")
    new = padded_checkpoint(keras_checkpoints, workspace.base / "new.hdf5", epoch_of=TFK_EPOCHS[1])
    outcomes = []
    for delay in (0.2, 0.5, 0.8, 1.1, 1.4, 1.8):
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(old, target)
        workspace.run("scan", str(target))
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(new), str(target), str(delay)])
        result = workspace.run("compress", str(target), check=False)
        assert writer.wait(timeout=60) == 0
        assert result.returncode in (0, 3), result.stderr
        assert target.read_bytes() == new.read_bytes(), (delay, result.returncode, result.stderr)
        outcomes.append(result.returncode)
    assert outcomes  # each outcome (refused, or compressed before the save) kept the save


# ---- item 26: stale temps of killed commands go with the next command or scan ------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temps_of_dead_writers_go_at_the_next_scan_or_command(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    files = zip_epochs(workspace, keras_checkpoints, "run")
    folder = files[0].parent
    dead = folder / f".ckpt-tmp-{dead_pid()}-0badf00d-{files[0].name}"
    live = folder / f".ckpt-tmp-{os.getpid()}-0badf00d-{files[2].name}"
    for temp in (dead, live):
        temp.write_bytes(b"half a checkpoint")
    workspace.run("scan")
    assert not dead.exists() and live.exists()
    from ckpt_daemon.fs import temp_names

    host = temp_names.temp_prefix().split("h")[-1].rstrip("-")  # this host's tag in our temp names
    mine = folder / f".ckpt-tmp-{dead_pid()}h{host}-0badf00d-{files[1].name}"
    elsewhere = folder / f".ckpt-tmp-{dead_pid()}h0000ffff-0badf00d-{files[2].name}"
    for temp in (mine, elsewhere):
        temp.write_bytes(b"half a checkpoint")
    workspace.run("compress", str(files[1]))  # a command on another checkpoint of the run
    assert not mine.exists()
    assert live.exists() and elsewhere.exists()  # a live writer's; another host's (NFS)


# ---- items 8 and 25: hostile but legal HDF5 files are refused quickly, with the reason --------


def unallocated(layer: h5py.Group) -> None:
    """4 TiB declared, nothing written: the file stays a few KB."""
    layer.create_dataset("kernel:0", shape=(2**40,), dtype="f4", chunks=(2**20,))


@pytest.mark.parametrize(
    ("fill", "reason"),
    [
        (unallocated, "declares 4.4 TB but stores 0 B"),
        # The scan's reader already refuses it (corrupt: nested deeper than 64 levels), so the
        # CLI refuses the row; the transforms' own refusal is the next test's.
        (deep_chain, "is corrupt"),
    ],
)
def test_hostile_files_are_refused_by_compress_and_split(
    workspace: Workspace, fill: Any, reason: str
) -> None:
    target = keras_looking_h5(workspace.root / "exp" / "hostile.h5", fill)
    size = target.stat().st_size
    workspace.run("scan", check=False)  # exit 3 where the reader records it corrupt
    data = target.read_bytes()
    for command in ("compress", "split"):
        cmd = [sys.executable, "-m", "ckpt_daemon", "--config", str(workspace.config), command]
        done = subprocess.run(  # generous: the old code ran for hours or crashed
            [*cmd, str(target)], capture_output=True, text=True, timeout=120, cwd=workspace.base
        )
        assert done.returncode == 2, (command, done.returncode, done.stderr[-2000:])
        assert reason in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert target.read_bytes() == data and size < 3 << 20
    assert sorted(p.name for p in target.parent.iterdir()) == ["hostile.h5"]


def test_the_service_kills_an_artifacts_child_past_its_timeout(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    target = padded_checkpoint(keras_checkpoints, workspace.root / "exp/weights.01-1.69.hdf5")
    workspace.run("scan")
    data = target.read_bytes()
    with workspace.config.open("a") as f:  # no child even gets its imports done in 10 ms
        f.write("artifacts:\n  compress_after: 0s\n  timeout: 0.01\n")
    done = workspace.run("serve", "--once", check=False)
    assert done.returncode == 3, done.stderr  # a job failed: said in the exit code too
    assert "event=compress_timeout" in done.stderr and "killed after 0.01 s" in done.stderr
    assert target.read_bytes() == data
    bad = workspace.config.read_text().replace("timeout: 0.01", "timeout: 0s")
    workspace.config.write_text(bad)
    refused = workspace.run("config", "check", str(workspace.config), check=False)
    assert refused.returncode == 2 and "artifacts.timeout" in refused.stderr + refused.stdout
