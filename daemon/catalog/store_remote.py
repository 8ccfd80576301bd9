"""Remote copies in the catalog (`remote_copies`, migration 0008): recorded once verified, their
state changed by the remote trash and `ckpt verify --remote`; a fetched file's new identity."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, insert, select, update

from ..core.model import FileStat
from ..core.remote import RemoteCopy, RemoteState
from ..core.usage import RemoteBytes
from . import db
from .audit import now_iso
from .rows import to_record
from .schema import CHECKPOINTS, REMOTE_COPIES, RUNS

copies, checkpoints = REMOTE_COPIES, CHECKPOINTS


def _copy(row: Any) -> RemoteCopy:
    return to_record(RemoteCopy, row, state=RemoteState(row.state))


def verified_bytes() -> Any:
    """(root, run, copies, bytes) of the verified remote copies, per run: `ckpt du`, the
    `ckpt_remote_bytes` gauge."""
    return (
        select(RUNS.c.root, RUNS.c.name, func.count(copies.c.id), func.sum(copies.c.size_bytes))
        .join(checkpoints, checkpoints.c.id == copies.c.checkpoint_id)
        .join(RUNS, RUNS.c.id == checkpoints.c.run_id)
        .where(copies.c.state == RemoteState.VERIFIED.value)
        .group_by(RUNS.c.root, RUNS.c.name)
    )


class RemoteCopies(db.Facet):
    """The remote copies of checkpoints (the `remote` facet)."""

    def remote_usage(self) -> list[RemoteBytes]:
        """Bytes of verified remote copies per root and run (`ckpt du`)."""
        return [
            RemoteBytes(r[0], r[1], int(r[2]), int(r[3] or 0)) for r in self._read(verified_bytes())
        ]

    def record_remote(
        self,
        checkpoint_id: int,
        *,
        url: str,
        endpoint: str | None,
        size_bytes: int,
        checksum: str | None,
        content_hash: str,
        uploaded_at: str,
    ) -> RemoteCopy:
        """A verified copy at `url` (the same URL again: verified anew, its row kept)."""
        now = now_iso()
        values = {
            "checkpoint_id": checkpoint_id,
            "endpoint": endpoint,
            "size_bytes": size_bytes,
            "checksum": checksum,
            "content_hash": content_hash,
            "state": RemoteState.VERIFIED.value,
            "reason": None,
            "uploaded_at": uploaded_at,
            "verified_at": now,
            "trash_key": None,
            "trashed_at": None,
        }
        with self._engine.begin() as conn:
            found = conn.execute(select(copies.c.id).where(copies.c.url == url)).scalar()
            if found is None:
                conn.execute(insert(copies).values(url=url, **values))
            else:
                conn.execute(update(copies).where(copies.c.id == found).values(**values))
            row = conn.execute(select(copies).where(copies.c.url == url)).one()
        return _copy(row)

    def remote_copies(self, checkpoint_ids: Iterable[int] | None = None) -> list[RemoteCopy]:
        """Every remote copy (of these checkpoints), oldest first."""
        query = select(copies).order_by(copies.c.id)
        if checkpoint_ids is not None:
            ids = sorted(set(checkpoint_ids))
            if not ids:
                return []
            query = query.where(copies.c.checkpoint_id.in_(ids))
        with self._engine.connect() as conn:
            return [_copy(r) for r in conn.execute(query)]

    def set_remote_state(
        self,
        copy_id: int,
        state: RemoteState,
        reason: str | None = None,
        *,
        trash_key: str | None = None,
        url: str | None = None,
        checksum: str | None = None,
    ) -> None:
        """A copy's new state (`trashed`: at `trash_key`; `verified`: at its URL again, with
        the `checksum` the service reports of it, when given)."""
        values: dict[str, Any] = {"state": state.value, "reason": reason}
        if state == RemoteState.TRASHED:
            values |= {"trash_key": trash_key, "trashed_at": now_iso()}
        if state == RemoteState.VERIFIED:
            values |= {"trash_key": None, "trashed_at": None, "verified_at": now_iso()}
        if url is not None:
            values["url"] = url
        if checksum is not None:
            values["checksum"] = checksum
        with self._engine.begin() as conn:
            conn.execute(update(copies).where(copies.c.id == copy_id).values(**values))

    def set_fetched(self, checkpoint_id: int, stat: FileStat) -> None:
        """The file fetched back to its path (after `set_status(ok)`) is the row's again, with
        its new inode: the bytes are the indexed ones (the fetch checked the hash), so the next
        scan does not read it again."""
        with self._engine.begin() as conn:
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id == checkpoint_id)
                .values(
                    size_bytes=stat.size,
                    mtime_ns=stat.mtime_ns,
                    inode=stat.inode,
                )
            )
