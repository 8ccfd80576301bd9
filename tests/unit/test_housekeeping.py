"""core.housekeeping, core.runs and tf_state.listed: a trainer's own files and removals told
apart from the run's checkpoints and from real losses; which runs `--run` covers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.housekeeping import (
    BACKUP_STATE,
    MISSING,
    REMOVED_BACKUP,
    ROTATED,
    backup_state_names,
    why_gone,
)
from ckpt_daemon.core.model import CheckpointStatus
from ckpt_daemon.core.runs import run_scope
from ckpt_daemon.formats import tf_state

REMOVED, GONE = CheckpointStatus.REMOVED, CheckpointStatus.MISSING

# ---- BackupAndRestore folders, by what is in them -----------------------------------------


@pytest.mark.parametrize(
    ("folder", "names", "state"),
    [
        # Keras 3.15: the weights and the metadata, with `.bkp` copies under double_checkpoint.
        ("backup", {"latest.weights.h5", "training_metadata.json"}, "all"),
        ("anything", {"training_metadata.json"}, "all"),
        (
            "b",
            {"latest.weights.h5", "latest.weights.h5.bkp", "training_metadata.json.bkp", "x.h5"},
            {"latest.weights.h5", "latest.weights.h5.bkp", "training_metadata.json.bkp"},
        ),
        # The same weights name without the metadata is a user's file.
        ("backup", {"latest.weights.h5"}, set()),
        # tf-keras: one CheckpointManager checkpoint in `chief/`.
        (
            "chief",
            {"checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001"},
            {"checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001"},
        ),
        ("workertemp_1", {"checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001"}, "all"),
        # A user's own CheckpointManager in a folder of their naming, or a `chief/` holding
        # anything else, is not tf-keras's.
        ("ckpts", {"checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001"}, set()),
        ("chief", {"checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "a.h5"}, set()),
        ("chief", {"model-2.index", "model-2.data-00000-of-00001", "checkpoint"}, set()),
    ],
)
def test_backup_folders_are_known_by_their_files(
    folder: str, names: set[str], state: set[str] | str
) -> None:
    expected = names if state == "all" else state
    assert backup_state_names(folder, names) == expected


# ---- a vanished checkpoint: missing, or removed by its trainer ----------------------------

D = "/r/exp/ckpts"


@pytest.mark.parametrize(
    ("path", "listed", "folder_exists", "verdict"),
    [
        # CheckpointManager(max_to_keep=2) after the 4th save: ckpt-1 and ckpt-2 rotated out.
        (f"{D}/ckpt-1", {f"{D}/ckpt-3", f"{D}/ckpt-4"}, True, (REMOVED, ROTATED)),
        (f"{D}/ckpt-2", {f"{D}/ckpt-3", f"{D}/ckpt-4"}, True, (REMOVED, ROTATED)),
        # Still listed: deleted by hand.
        (f"{D}/ckpt-3", {f"{D}/ckpt-3", f"{D}/ckpt-4"}, True, (GONE, MISSING)),
        # Not listed, but nothing newer of its series is: not a rotation.
        (f"{D}/ckpt-5", {f"{D}/ckpt-3", f"{D}/ckpt-4"}, True, (GONE, MISSING)),
        (f"{D}/ckpt-1", {f"{D}/model-4"}, True, (GONE, MISSING)),
        (f"{D}/ckpt-1", {"/r/other/ckpt-4"}, True, (GONE, MISSING)),  # another folder's
        (f"{D}/ckpt-1", frozenset(), True, (GONE, MISSING)),
        (f"{D}/ckpt-1", None, True, (GONE, MISSING)),  # no state file
        (f"{D}/best", {f"{D}/ckpt-4"}, True, (GONE, MISSING)),  # not a numbered series
        # The save counter is a number, not text: ckpt-9 is older than ckpt-10.
        (f"{D}/ckpt-9", {f"{D}/ckpt-10"}, True, (REMOVED, ROTATED)),
        (f"{D}/ckpt-10", {f"{D}/ckpt-9"}, True, (GONE, MISSING)),
        # A named series (checkpoint_name="model") rotates the same way.
        (f"{D}/model-1", {f"{D}/model-2"}, True, (REMOVED, ROTATED)),
        # Keras 3 BackupAndRestore's weights: its folder is removed when training ends.
        ("/r/exp/backup/latest.weights.h5", None, False, (REMOVED, REMOVED_BACKUP)),
        ("/r/exp/backup/latest.weights.h5", None, True, (GONE, MISSING)),  # by hand
        ("/r/exp/backup/model.weights.h5", None, False, (GONE, MISSING)),
        # tf-keras's `chief/` folder, gone with its backup folder.
        ("/r/exp/backup/chief/ckpt-3", None, False, (REMOVED, REMOVED_BACKUP)),
        ("/r/exp/mine/ckpt-3", None, False, (GONE, MISSING)),  # a run folder deleted
    ],
)
def test_a_vanished_checkpoint_is_missing_unless_its_trainer_removed_it(
    path: str,
    listed: set[str] | None,
    folder_exists: bool,
    verdict: tuple[CheckpointStatus, str],
) -> None:
    assert why_gone(path, listed, folder_exists=folder_exists) == verdict


def test_a_backup_file_still_on_disk_is_removed_from_the_runs_checkpoints() -> None:
    verdict = why_gone("/r/b/latest.weights.h5", None, folder_exists=True, backup_state=True)
    assert verdict == (REMOVED, BACKUP_STATE)


def test_the_reasons_say_who_removed_it() -> None:
    assert ROTATED.startswith("removed by trainer (CheckpointManager rotation")
    assert REMOVED_BACKUP.startswith("removed by trainer (Keras BackupAndRestore")
    assert MISSING == "no longer on disk"


# ---- tf_state.listed ---------------------------------------------------------------------


def test_the_state_file_lists_latest_and_kept_checkpoints_as_paths() -> None:
    text = (
        'model_checkpoint_path: "ckpt-4"\n'
        'all_model_checkpoint_paths: "ckpt-3"\n'
        'all_model_checkpoint_paths: "ckpt-4"\n'
        "all_model_checkpoint_timestamps: 1795964367.95\n"
        'all_model_checkpoint_paths: "/elsewhere/ckpt-1"\n'
        'all_model_checkpoint_paths: "../up/ckpt-2"\n'
        "garbage line \x00 \ufffd\n"
    )
    assert tf_state.listed(text, "/r/run") == [
        "/r/run/ckpt-4",
        "/r/run/ckpt-3",
        "/elsewhere/ckpt-1",
        "/r/up/ckpt-2",
    ]
    assert tf_state.listed("", "/r") == []
    assert tf_state.listed('model_checkpoint_path: ""\n', "/r") == []


# ---- run scope ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "name", "covered"),
    [
        ("exp", "exp", True),
        ("exp", "exp/checkpoints", True),
        ("exp", "exp/ckpt/fold1", True),
        ("exp", "exp2", False),
        ("exp", "exp-b", False),  # "-" sorts before "/"
        ("exp", "exp.b", False),
        ("exp", "ex", False),
        ("exp/", "exp/checkpoints", True),
        ("exp/checkpoints", "exp", False),
        ("a%_", "a%_/x", True),
        ("a%_", "ab_", False),
        (".", "anything/below", True),
        (".", ".", True),
    ],
)
def test_a_run_covers_itself_and_the_runs_below_it(run: str, name: str, covered: bool) -> None:
    assert run_scope(run).covers(name) is covered


@given(
    st.text(st.sampled_from("ab/%_.-0"), min_size=1, max_size=6),
    st.text(st.sampled_from("ab/%_.-0\u00e9\U0001f600"), max_size=8),
)
def test_the_name_range_is_the_prefix_rule(run: str, name: str) -> None:
    """The range the SQL uses is exactly `name == run or name starts with run + "/"`."""
    base = run.rstrip("/") or run
    expected = base == "." or name == base or name.startswith(base + "/")
    assert run_scope(run).covers(name) is expected
