"""Mistyped arguments are usage errors (exit 2, one line naming the option), never a partial
failure and never a silent default."""

from __future__ import annotations

from pathlib import Path

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, zip_run


def test_split_out_outside_the_root_is_a_usage_error_and_writes_nothing(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    zip_run(workspace, keras_checkpoints)
    workspace.run("scan")
    elsewhere = workspace.base / "elsewhere"
    source = workspace.root / ZIP_RUN / ZIP_FILES[0]
    done = workspace.run("split", str(source), "--out", str(elsewhere), check=False)
    assert done.returncode == 2, done.stderr
    assert "--out" in done.stderr and "not inside the checkpoint's root" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not elsewhere.exists()


def test_an_empty_older_than_is_refused_not_read_as_the_default(workspace: Workspace) -> None:
    workspace.run("scan")  # the catalog (a purge of none is refused for that reason alone)
    for args in (
        ("trash", "purge", "--older-than", ""),
        ("trash", "purge", "-n", "--older-than", ""),
    ):
        done = workspace.run(*args, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("ckpt: ") and "--older-than" in done.stderr
    assert workspace.run("trash", "purge", "-n", "--older-than", "3d").returncode == 0
