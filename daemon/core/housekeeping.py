"""Files a training framework manages itself, told apart from the run's checkpoints (pure).

Keras's `BackupAndRestore` keeps the trainer's crash-recovery state in a folder it rewrites at
every save and deletes when training ends; TF's `CheckpointManager(max_to_keep=N)` deletes its
oldest checkpoints and rewrites the `checkpoint` state file. Both are the trainer doing its
job: a catalog that calls them `missing` cries wolf, and a user stops reading the warning that
matters (a checkpoint deleted by hand, a disk that lost files).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection

from .model import CheckpointStatus

BACKUP_STATE = "Keras BackupAndRestore state (the trainer deletes it when training ends)"
REMOVED_BACKUP = (
    "removed by trainer (Keras BackupAndRestore: its state is deleted when training ends)"
)
ROTATED = "removed by trainer (CheckpointManager rotation: no longer in the checkpoint state file)"
MISSING = "no longer on disk"

# Keras 3 (keras/src/callbacks/backup_and_restore.py): fixed names in the backup folder, plus
# copies with `.bkp` under `double_checkpoint=True`.
KERAS_METADATA = "training_metadata.json"
KERAS_WEIGHTS = "latest.weights.h5"
_KERAS_NAMES = frozenset(
    {KERAS_METADATA, KERAS_WEIGHTS, KERAS_METADATA + ".bkp", KERAS_WEIGHTS + ".bkp"}
)
# tf-keras (tf_keras/src/distribute/worker_training_state.py): a CheckpointManager of one
# checkpoint, `ckpt-<n>`, in `<backup_dir>/chief/` (`workertemp_<id>/` on the other workers).
# Those folder names are tf-keras's, not the user's; the files in them must all be its too.
_TF_KERAS_FOLDER = re.compile(r"^(chief|workertemp_\d+)$")
_TF_KERAS_FILE = re.compile(
    r"^(checkpoint(\.tmp[0-9a-f]*)?|ckpt-\d+\.(index|data-\d{5}-of-\d{5}))$"
)
_TF_KERAS_INDEX = re.compile(r"^ckpt-\d+\.index$")
_NUMBERED = re.compile(r"^(?P<stem>.*)-(?P<number>\d+)$")


def backup_state_names(folder_name: str, names: Collection[str]) -> frozenset[str]:
    """The file names in a folder (named `folder_name`, holding `names`) that are a
    `BackupAndRestore` callback's state; empty when the folder is not a backup folder."""
    if KERAS_METADATA in names or KERAS_METADATA + ".bkp" in names:
        return frozenset(n for n in names if n in _KERAS_NAMES)
    if (
        _TF_KERAS_FOLDER.match(folder_name)
        and "checkpoint" in names
        and any(_TF_KERAS_INDEX.match(n) for n in names)
        and all(_TF_KERAS_FILE.match(n) for n in names)
    ):
        return frozenset(names)
    return frozenset()


def why_gone(
    path: str,
    listed: Collection[str] | None,
    *,
    folder_exists: bool,
    backup_state: bool = False,
) -> tuple[CheckpointStatus, str]:
    """Is a catalogued checkpoint no longer indexed because its trainer removed it, or missing?

    `path`: the checkpoint (a TF checkpoint by its prefix); `listed`: the paths its folder's
    `checkpoint` state file lists (None: no state file); `folder_exists`: its folder is still
    there; `backup_state`: the scan found it on disk as BackupAndRestore state.
    """
    folder, name = posixpath.split(posixpath.normpath(path))
    if backup_state:
        return CheckpointStatus.REMOVED, BACKUP_STATE
    # BackupAndRestore removes its whole folder at the end of training (`rmtree`); a file of
    # that name deleted from a folder that is still there was deleted by someone else.
    backup_names = _KERAS_NAMES | {name} if _is_tf_keras_backup(folder, name) else _KERAS_NAMES
    if not folder_exists and name in backup_names:
        return CheckpointStatus.REMOVED, REMOVED_BACKUP
    if listed is not None and _rotated_out(folder, name, listed):
        return CheckpointStatus.REMOVED, ROTATED
    return CheckpointStatus.MISSING, MISSING


def _is_tf_keras_backup(folder: str, name: str) -> bool:
    return bool(_TF_KERAS_FOLDER.match(posixpath.basename(folder))) and bool(
        _TF_KERAS_INDEX.match(name + ".index")
    )


def _rotated_out(folder: str, name: str, listed: Collection[str]) -> bool:
    """No longer listed while a newer checkpoint of the same series (`ckpt-<n>`, `n` the
    manager's save counter) is: what CheckpointManager's `max_to_keep` does."""
    vanished = _NUMBERED.match(name)
    if vanished is None:
        return False
    names = set()
    for entry in listed:
        entry_folder, entry_name = posixpath.split(posixpath.normpath(entry))
        if entry_folder == folder:
            names.add(entry_name)
    if name in names:
        return False  # the state file still names it: someone else deleted it
    newer = (_NUMBERED.match(n) for n in names)
    return any(
        m is not None
        and m["stem"] == vanished["stem"]
        and int(m["number"]) > int(vanished["number"])
        for m in newer
    )
