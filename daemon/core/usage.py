"""Bytes on disk per root, run and kind (`ckpt du`), decided from catalog rows. Pure.

The catalog says what each file is and how big it was when indexed; nothing is walked. Kinds: a
checkpoint at its path, an inference artifact we wrote, a kept version of a rewritten checkpoint
(`core.versions.is_version_path`), a checkpoint in the trash. A missing, removed or purged
checkpoint takes no space and is not counted. What versions cost is also given whole: those kept
and those in the trash (which the `trash` kind counts too), since both hold the filesystem's
space until purged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .history import versioned_run
from .model import CheckpointStatus

KINDS = ("checkpoint", "inference", "version", "trash")
_NOT_ON_DISK = {CheckpointStatus.MISSING, CheckpointStatus.REMOVED, CheckpointStatus.PURGED}


@dataclass(frozen=True)
class CheckpointBytes:
    """Checkpoint rows of one (root, run, status, in the versions folder) with their bytes."""

    root: str
    run: str
    status: CheckpointStatus
    version: bool
    files: int
    bytes: int


@dataclass(frozen=True)
class ArtifactBytes:
    """Derived files (not in-place rewrites) of one (root, run, artifact kind)."""

    root: str
    run: str
    kind: str
    files: int
    bytes: int


def kind_of(status: CheckpointStatus, version: bool) -> str | None:
    """Which `du` kind checkpoint rows are, or None when their files are not on disk."""
    if status is CheckpointStatus.TRASHED:
        return "trash"
    if status in _NOT_ON_DISK:
        return None
    return "version" if version else "checkpoint"


@dataclass(frozen=True)
class RemoteBytes:
    """Verified remote copies of one (root, run): in the object store, not on the local disk."""

    root: str
    run: str
    files: int
    bytes: int


@dataclass
class Tally:
    name: str
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    files: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    # Of the `trash` kind, what versions left there: with `version`, what versions cost.
    version_trash_bytes: int = 0
    version_trash_files: int = 0
    # In the object store (verified copies): not part of `total`, which is the local disk's.
    remote_bytes: int = 0
    remote_files: int = 0

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def add(self, kind: str, files: int, size: int, *, version: bool = False) -> None:
        self.bytes[kind] += size
        self.files[kind] += files
        if version and kind == "trash":
            self.version_trash_bytes += size
            self.version_trash_files += files


@dataclass(frozen=True)
class RootUsage:
    root: Tally
    runs: list[Tally]  # biggest first


def summarize(
    checkpoints: Iterable[CheckpointBytes],
    artifacts: Iterable[ArtifactBytes],
    remote: Iterable[RemoteBytes] = (),
) -> list[RootUsage]:
    """Per root (biggest first), its total by kind and its runs by kind (biggest first; ties
    by name); versions count in the run they are versions of. A run with nothing on disk nor
    in the object store is not listed; `remote`: bytes in the store, beside the local total."""
    roots: dict[str, Tally] = {}
    runs: dict[tuple[str, str], Tally] = {}
    rows: list[tuple[str, str, str, int, int, bool]] = [
        (c.root, versioned_run(c.run) if c.version else c.run, kind, c.files, c.bytes, c.version)
        for c in checkpoints
        if (kind := kind_of(c.status, c.version)) is not None
    ]
    rows += [(a.root, a.run, "inference", a.files, a.bytes, False) for a in artifacts]
    for root, run, kind, files, size, version in rows:
        roots.setdefault(root, Tally(root)).add(kind, files, size, version=version)
        runs.setdefault((root, run), Tally(run)).add(kind, files, size, version=version)
    for r in remote:
        of_run = runs.setdefault((r.root, r.run), Tally(r.run))
        for tally in (roots.setdefault(r.root, Tally(r.root)), of_run):
            tally.remote_bytes += r.bytes
            tally.remote_files += r.files
    out = []
    for root, tally in sorted(roots.items(), key=lambda item: (-item[1].total, item[0])):
        of_root = [t for (r, _), t in runs.items() if r == root]
        out.append(RootUsage(tally, sorted(of_root, key=lambda t: (-t.total, t.name))))
    return out


def versions_cost(t: Tally) -> dict[str, int]:
    """What kept versions cost: those kept (`version`) and those in the trash (part of `trash`),
    which stay on the filesystem until purged."""
    kept = t.bytes["version"]
    return {
        "bytes": kept + t.version_trash_bytes,
        "kept_bytes": kept,
        "trash_bytes": t.version_trash_bytes,
        "kept_files": t.files["version"],
        "trash_files": t.version_trash_files,
    }


def usage_json(usage: list[RootUsage]) -> dict[str, Any]:
    """`ckpt du --json` (stable field names: add, never rename)."""

    def counted(t: Tally) -> dict[str, Any]:
        return {
            "bytes": t.total,
            "by_kind": dict(t.bytes),
            "files": dict(t.files),
            "versions": versions_cost(t),
            "remote_bytes": t.remote_bytes,
            "remote_files": t.remote_files,
        }

    return {
        "bytes": sum(u.root.total for u in usage),
        "remote_bytes": sum(u.root.remote_bytes for u in usage),
        "kinds": list(KINDS),
        "roots": [
            {
                "root": u.root.name,
                **counted(u.root),
                "runs": [{"run": t.name, **counted(t)} for t in u.runs],
            }
            for u in usage
        ],
    }
