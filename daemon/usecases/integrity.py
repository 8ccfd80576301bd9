"""`ckpt integrity REF`: the health scan of one checkpoint's weights (`formats.weight_scan`),
as the built-in `integrity` stage runs it. Its answer is the stage's result line (`core.health`):
the tallies as `integrity:*` metrics, a note, the tensors flagged, and the checkpoint's path and
format. A format whose weights are not read answers `not scanned: <format>`, never healthy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core import health
from ..core.errors import NotScanned
from ..core.model import Checkpoint
from ..formats import weight_scan


def scan_checkpoint(checkpoint: Checkpoint) -> dict[str, Any]:
    """The result document of `checkpoint` (CorruptCheckpoint, with the reason, for weights
    that contradict themselves: truncated, offsets or views out of their file)."""
    fmt = checkpoint.format
    if fmt is None or not weight_scan.scannable(fmt):
        document = health.not_scanned(f"{fmt.value if fmt else 'unknown format'} weights")
        files: list[str] = []
    else:
        try:
            found = weight_scan.scan(Path(checkpoint.path), fmt)
        except NotScanned as exc:
            return {**health.not_scanned(str(exc)), "path": checkpoint.path,
                    "format": fmt.value, "files": []}  # fmt: skip
        document = health.result(found.tallies, len(found.files))
        files = found.files
    return {
        **document,
        "path": checkpoint.path,
        "format": fmt.value if fmt else None,
        "files": files,
    }
