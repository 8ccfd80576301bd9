"""Read claims: several daemons watch one shared folder, and a new file is read by one of them.

Every daemon sees a new file at about the same time (each host's watcher or poll). Before
reading it, a daemon claims its path (`Claims.claim_read`, serialized with `Index.record` on the
path, so the check and the claim are one step): if the catalog already holds these bytes it is
not read again; if another node's claim is unexpired the file is left to that node; otherwise
the claim is ours, for `ttl` seconds by the database's clock. `Index.record` deletes the claim
in the transaction that records the file. A claimant that dies leaves a claim that expires,
after which the next scan of any daemon reads the file.

Correctness does not rest on claims: `Index.record` keeps one row and one `indexed` event per
path whoever records it, so an expired claim or a SQLite catalog (one host; no claims there)
only costs a second read.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import delete, insert, select, update

from ..core.model import CheckpointStatus, FileStat
from . import db
from .audit import iso
from .schema import CHECKPOINTS, CLAIMS, RECORDS

checkpoints, claims = CHECKPOINTS, CLAIMS
# Rows whose bytes need no second read when the stat is unchanged (indexer._SETTLED).
_SETTLED = (CheckpointStatus.OK.value, CheckpointStatus.CORRUPT.value)


class Claim(enum.Enum):
    OURS = "ours"  # read it
    RECORDED = "recorded"  # the catalog already holds these bytes: nothing to read
    ELSEWHERE = "elsewhere"  # another node is reading it now


class Claims(db.Facet):
    """The read claims (the `claims` facet)."""

    def claims_reads(self) -> bool:
        """Whether claims are kept: on a catalog several hosts share (not SQLite)."""
        return self._engine.dialect.name != "sqlite"

    def claim_read(
        self, path: str, stat: FileStat, node: str, ttl_seconds: float
    ) -> tuple[Claim, str | None]:
        """Claim the new or changed file at `path` for reading; (outcome, the other node)."""
        with self._engine.begin() as conn:
            db.serialize(conn, "path", path)  # as `Index.record`: the claim sees its commit
            row = conn.execute(
                select(
                    checkpoints.c.size_bytes,
                    checkpoints.c.mtime_ns,
                    checkpoints.c.inode,
                    checkpoints.c.status,
                ).where(checkpoints.c.path == path, checkpoints.c.status.not_in(RECORDS))
            ).first()
            if (
                row is not None
                and row.status in _SETTLED
                and FileStat(row.size_bytes, row.mtime_ns, row.inode) == stat
            ):
                return Claim.RECORDED, None
            moment = db.clock(conn)
            held = conn.execute(
                select(claims.c.node, claims.c.expires_at)
                .where(claims.c.path == path)
                .with_for_update()
            ).first()
            if held is not None and held.node != node and held.expires_at > iso(moment):
                return Claim.ELSEWHERE, held.node
            _put(conn, path, node, moment + dt.timedelta(seconds=ttl_seconds), held is None)
            return Claim.OURS, None

    def release_read(self, path: str, node: str) -> None:
        """Our claim on `path` ends without a record (the file was not a checkpoint, vanished)."""
        with self._engine.begin() as conn:
            conn.execute(delete(claims).where(claims.c.path == path, claims.c.node == node))


def _put(conn: Any, path: str, node: str, expires: dt.datetime, new: bool) -> None:
    if new:
        conn.execute(insert(claims).values(path=path, node=node, expires_at=iso(expires)))
    else:
        conn.execute(
            update(claims).where(claims.c.path == path).values(node=node, expires_at=iso(expires))
        )


def drop_claim(conn: Any, path: str) -> None:
    """In `Index.record`'s transaction: the file is recorded, nobody needs to read it."""
    conn.execute(delete(claims).where(claims.c.path == path))
