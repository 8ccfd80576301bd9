"""Which checkpoints a folder's TensorFlow `checkpoint` state file lists, read beneath the root.

The state file is trainer-written text like any file in a root: read bounded, through
`fs.beneath` (no symlink followed), and any problem means "no state file to go by".
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import CkptError
from ..fs import beneath
from . import tf_state

# A CheckpointManager's state file names each kept checkpoint on two lines: a few KiB at most.
STATE_FILE_LIMIT = 1 << 20


def listed_checkpoints(folder: Path, root: Path) -> frozenset[str] | None:
    """The paths the state file in `folder` lists (a TF checkpoint by its prefix); None if
    there is no readable state file there (missing, too big, not text, not a regular file)."""
    try:
        data = beneath.read_bounded(folder / tf_state.STATE_FILE, STATE_FILE_LIMIT, root)
    except (OSError, CkptError):
        return None
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return frozenset(tf_state.listed(text, str(folder)))
