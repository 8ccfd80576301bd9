"""Where each listed checkpoint's bytes are: `location` and `remote_url` of the listings, the
`--location` filter. The remote copies are read only when a `remote:` is configured or asked
for, so `ckpt list` without object storage stays on the fast reads (no Store opened)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ...core.errors import UsageError
from ...core.model import Checkpoint, CheckpointStatus
from ...core.query import OFF_DISK
from ...core.remote import Location, RemoteCopy, location, verified_copy

if TYPE_CHECKING:  # `ckpt list` without a remote never imports SQLAlchemy
    from ...catalog.store import RemoteCopies
    from ...settings.config import Config

LOCATIONS = tuple(v.value for v in Location)


def uses_remote(config: Config) -> bool:
    return config.remote is not None or any(r.remote for r in config.roots)


def by_checkpoint(remote: RemoteCopies, found: Iterable[Checkpoint]) -> dict[int, list[RemoteCopy]]:
    """The remote copies of `found`, by checkpoint id (none: not in the dict)."""
    copies: dict[int, list[RemoteCopy]] = {}
    for copy in remote.remote_copies(c.id for c in found):
        copies.setdefault(copy.checkpoint_id, []).append(copy)
    return copies


def locations(
    config: Config, remote: Callable[[], RemoteCopies], found: Sequence[Checkpoint]
) -> dict[int, tuple[str, str | None]]:
    if not uses_remote(config):  # no remote copies: the status alone says (100,000 rows)
        by_status = {s: (location(s, []).value, None) for s in CheckpointStatus}
        return {c.id: by_status[c.status] for c in found}
    copies = by_checkpoint(remote(), found) if found else {}
    answer: dict[int, tuple[str, str | None]] = {}
    for c in found:
        mine = copies.get(c.id, [])
        verified = verified_copy(mine)
        answer[c.id] = (location(c.status, mine).value, verified.url if verified else None)
    return answer


def filtered(
    remote: RemoteCopies, found: Sequence[Checkpoint], wanted: str, limit: int | None
) -> list[Checkpoint]:
    if wanted not in LOCATIONS:
        raise UsageError(f"--location {wanted!r}: not one of {', '.join(LOCATIONS)}")
    copies = by_checkpoint(remote, found)
    kept = [c for c in found if location(c.status, copies.get(c.id, [])).value == wanted]
    return kept if limit is None else kept[:limit]


def with_tiered(
    remote: RemoteCopies, found: Sequence[Checkpoint], limit: int | None
) -> list[Checkpoint]:
    """The ordinary listing (`ckpt list` without --status) of `found` (every row): the rows
    whose file is at its path, and the rows trashed or purged from the disk whose bytes are
    only in the object store (a tiered checkpoint); never the other rows off the disk."""
    off_disk = [c for c in found if c.status.value in OFF_DISK]
    copies = by_checkpoint(remote, off_disk)
    kept = [
        c
        for c in found
        if c.status.value not in OFF_DISK
        or location(c.status, copies.get(c.id, [])) == Location.REMOTE
    ]
    return kept if limit is None else kept[:limit]
