"""Where a checkpoint's bytes are: `local`, `remote` or `both`, from its status and its verified
remote copies (pure). A copy counts only while `verified`: one found changed or missing by
`ckpt verify --remote` is never trusted."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .model import CheckpointStatus


class RemoteState(StrEnum):
    VERIFIED = "verified"
    TRASHED = "trashed"  # under the store's trash prefix, purged after trash.purge_after
    PURGED = "purged"
    MISSING = "missing"  # gone from the store (found by `ckpt verify --remote`)
    CHANGED = "changed"  # other bytes under the key


class Location(StrEnum):
    LOCAL = "local"
    REMOTE = "remote"
    BOTH = "both"
    NONE = "none"  # neither: trashed locally without a verified remote copy, or purged


@dataclass(frozen=True)
class RemoteCopy:
    id: int
    checkpoint_id: int
    url: str
    endpoint: str | None
    size_bytes: int
    checksum: str | None
    content_hash: str
    state: RemoteState
    reason: str | None
    uploaded_at: str
    verified_at: str
    trash_key: str | None = None
    trashed_at: str | None = None

    @property
    def key(self) -> str:
        return self.url.split("/", 3)[3]


_LOCAL = {  # its bytes are at its path
    CheckpointStatus.OK,
    CheckpointStatus.INCOMPLETE,
    CheckpointStatus.CORRUPT,
    CheckpointStatus.UNREADABLE,
    CheckpointStatus.STANDBY,
}


def location(status: CheckpointStatus, copies: list[RemoteCopy]) -> Location:
    remote = any(c.state == RemoteState.VERIFIED for c in copies)
    local = status in _LOCAL
    if local and remote:
        return Location.BOTH
    if remote:
        return Location.REMOTE
    return Location.LOCAL if local else Location.NONE


def verified_copy(copies: list[RemoteCopy]) -> RemoteCopy | None:
    return next((c for c in copies if c.state == RemoteState.VERIFIED), None)
