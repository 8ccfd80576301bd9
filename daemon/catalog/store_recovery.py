"""The catalog side of crash recovery (`usecases.recovery` decides from the disk): reads of
trash records and planned events, and the writes that follow: trash records for what is found in
the trash folder, planned events closed `done` or `abandoned`, and the rows they concern given
the status the disk shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select

from ..core.errors import NotFound
from ..core.model import CheckpointStatus, FileStat
from . import db
from .audit import close_event, iso, now_iso, patch_details, record_event
from .schema import CHECKPOINTS, EVENTS, LEASES, RECORDS, RUNS
from .store_actions import free_path
from .store_runs import run_id_for
from .store_versions import sync_standby

checkpoints, events, runs = CHECKPOINTS, EVENTS, RUNS


@dataclass(frozen=True)
class PlannedEvent:
    """An act recorded before it happened and not closed yet, with the process that planned it."""

    id: int
    at: str
    action: str
    checkpoint_id: int | None
    path: str
    host: str | None
    pid: int | None


@dataclass(frozen=True)
class RowState:
    """What the catalog says of the checkpoint an event concerns: its status, where its files
    went if trashed (`trash`: paths, members, ...), and its hash (None: never read)."""

    id: int
    status: str
    trash: dict[str, Any] | None
    hash: str | None


class Recovery(db.Facet):
    """The recovery reads and writes (the `recovery` facet)."""

    def run_of(self, checkpoint_id: int) -> int:
        found = self._read(select(checkpoints.c.run_id).where(checkpoints.c.id == checkpoint_id))
        if not found:
            raise NotFound(f"no checkpoint {checkpoint_id} in the catalog")
        return int(found[0][0])

    def trashed_at(self, path: str) -> list[int]:
        """Ids of the trashed checkpoints that were at `path` (several if trashed again)."""
        stmt = (
            select(checkpoints.c.id)
            .where(
                checkpoints.c.path == path,
                checkpoints.c.status == CheckpointStatus.TRASHED.value,
            )
            .order_by(checkpoints.c.id)
        )
        return [int(r[0]) for r in self._read(stmt)]

    def trash_paths(self, root: str) -> set[str]:
        """Every trash path the catalog knows under `root`: trashed rows, and purges under way
        (purged rows that have a planned purge event)."""
        purging = select(events.c.checkpoint_id).where(
            events.c.action == "purge", events.c.state == "planned"
        )
        stmt = (
            select(checkpoints.c.details)
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(
                runs.c.root == root,
                (checkpoints.c.status == CheckpointStatus.TRASHED.value)
                | (
                    (checkpoints.c.status == CheckpointStatus.PURGED.value)
                    & checkpoints.c.id.in_(purging)
                ),
            )
        )
        return {
            p
            for (details,) in self._read(stmt)
            for p in ((details or {}).get("trash") or {}).get("paths", [])
        }

    def adopt_trashed(
        self,
        *,
        root: str,
        run: str,
        path: str,
        stat: FileStat,
        trash: dict[str, Any],
        files: list[str],
        version_of: str | None = None,
        generation: int = 1,
        digest: str | None = None,
        reason: str = "found in the trash folder (the command that moved it was interrupted)",
    ) -> int | None:
        """A checkpoint found in the trash folder becomes `trashed`: the row that described
        those very files (same inode) if there is one, else a new row (unread: format unknown;
        a version file's: `version_of` the file it keeps, its `generation`, and its hash when
        known, so that `trash restore` brings it back as that version).
        None: nothing to adopt (checked in the transaction, as other daemons sharing the root
        prune it): its trash record exists by now, or its move is in flight (a `trash` event
        is planned and the run's lease is held: its mover records it, or expires and the next
        reconcile adopts it).
        """
        now = now_iso()
        with self._engine.begin() as conn:
            db.serialize(conn, "path", path)
            run_id = run_id_for(conn, root, run, now)
            recorded = conn.execute(
                select(checkpoints.c.id).where(
                    checkpoints.c.path == path,
                    checkpoints.c.inode == stat.inode,
                    checkpoints.c.status == CheckpointStatus.TRASHED.value,
                )
            ).first()
            if recorded is not None or move_in_flight(conn, path, run_id):
                return None
            found = conn.execute(
                select(checkpoints.c.id).where(
                    checkpoints.c.path == path,
                    checkpoints.c.run_id == run_id,
                    checkpoints.c.inode == stat.inode,
                    checkpoints.c.status.not_in(RECORDS),
                )
            ).scalar()
            if found is not None:
                checkpoint_id = int(found)
                patch_details(
                    conn,
                    checkpoint_id,
                    {"trash": trash},
                    status=CheckpointStatus.TRASHED.value,
                    reason=reason,
                )
            else:
                details = {"trash": trash, "notes": [reason], **({"files": files} if files else {})}
                checkpoint_id = db.inserted_id(
                    conn,
                    insert(checkpoints).values(
                        run_id=run_id,
                        path=path,
                        status=CheckpointStatus.TRASHED.value,
                        reason=reason,
                        size_bytes=stat.size,
                        mtime_ns=stat.mtime_ns,
                        inode=stat.inode,
                        generation=generation,
                        version_of=version_of,
                        hash=digest,
                        pinned=False,
                        first_seen_at=now,
                        details=details,
                    ),
                )
            planned = (
                conn.execute(
                    select(events.c.id).where(
                        events.c.checkpoint_id == checkpoint_id,
                        events.c.action == "trash",
                        events.c.state == "planned",
                    )
                )
                .scalars()
                .all()
            )
            for event_id in planned:
                close_event(conn, event_id, "done")
            if not planned:
                record_event(
                    conn,
                    action="trash",
                    checkpoint_id=checkpoint_id,
                    path=path,
                    reason=reason,
                    size=stat.size,
                    actor="ckpt:recovery",
                    at=now,
                    process=True,
                )
        return checkpoint_id

    def planned_events(self) -> list[PlannedEvent]:
        stmt = select(
            events.c.id,
            events.c.at,
            events.c.action,
            events.c.checkpoint_id,
            events.c.path,
            events.c.host,
            events.c.pid,
        ).where(events.c.state == "planned")
        return [PlannedEvent(**r._mapping) for r in self._read(stmt)]

    def row_state(self, checkpoint_id: int | None) -> RowState | None:
        if checkpoint_id is None:
            return None
        found = self._read(
            select(checkpoints.c.status, checkpoints.c.details, checkpoints.c.hash).where(
                checkpoints.c.id == checkpoint_id
            )
        )
        if not found:
            return None
        row = found[0]
        return RowState(checkpoint_id, row.status, (row.details or {}).get("trash"), row.hash)

    def settle(
        self,
        event_id: int,
        state: str,
        *,
        checkpoint_id: int | None = None,
        expect: str | None = None,
        status: CheckpointStatus | None = None,
        reason: str | None = None,
        clear_trash: bool = False,
    ) -> None:
        """Close a planned event (`done` / `abandoned`) and, if the row still has status
        `expect`, give it `status` (what the disk shows), in one transaction."""
        with self._engine.begin() as conn:
            if checkpoint_id is not None and status is not None and expect is not None:
                current = conn.execute(
                    select(
                        checkpoints.c.status, checkpoints.c.path, checkpoints.c.version_of
                    ).where(checkpoints.c.id == checkpoint_id)
                ).first()
                if current is not None and current.status == expect:
                    if status not in RECORDS:
                        free_path(conn, checkpoint_id)
                    patch_details(
                        conn,
                        checkpoint_id,
                        drop=("trash",) if clear_trash else (),
                        status=status.value,
                        reason=_status_reason(status),
                    )
                    # back `ok` at its path: its kept copies of the same bytes are standby again
                    sync_standby(conn, current.version_of or current.path)
            close_event(conn, event_id, state, reason)


def _status_reason(status: CheckpointStatus) -> str | None:
    return {
        CheckpointStatus.PURGED: "deleted from the trash",
        CheckpointStatus.INCOMPLETE: "restored from the trash: read at the next scan",
    }.get(status)


def move_in_flight(conn: Any, path: str, run_id: int) -> bool:
    """A move of the live row at `path` to the trash in flight: planned, its run's lease held."""
    return act_in_flight(conn, path, run_id, "trash")


def act_in_flight(conn: Any, path: str, run_id: int, action: str) -> bool:
    """An act `action` on the live row at `path` in flight: planned, its run's lease held."""
    planned = conn.execute(
        select(events.c.id)
        .join(checkpoints, checkpoints.c.id == events.c.checkpoint_id)
        .where(
            checkpoints.c.path == path,
            checkpoints.c.status.not_in(RECORDS),
            events.c.action == action,
            events.c.state == "planned",
        )
    ).first()
    if planned is None:
        return False
    held = conn.execute(
        select(LEASES.c.run_id).where(
            LEASES.c.run_id == run_id, LEASES.c.expires_at > iso(db.clock(conn))
        )
    ).first()
    return held is not None
