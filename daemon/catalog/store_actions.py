"""The catalog side of destructive actions: audit events, claims, trash states, pins and
artifact records, and the reads these need (the trash listing, `ckpt log`, artifact lookups).

Every file action is recorded as a `planned` event (with the host and pid of the process that
plans it) before the filesystem call and marked `done` or `failed` after it, so a crash in
between leaves a trace to reconcile (`usecases.recovery` closes it `done` or `abandoned`).

Moves to the trash and purges are *claimed* first: one transaction re-reads the row's status
and pin and changes its status only if the act is still allowed, so a pin and a move are
serialized by the database (whichever commits first wins, and the other sees it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import delete, insert, select, update

from ..core.model import AuditEvent, CheckpointStatus, FileStat, TrashedCheckpoint
from . import db
from .audit import close_event, now_iso, patch_details, record_event
from .rows import to_record
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, RECORDS, RUNS, at_or_below
from .store_leases import HeldLease
from .store_reads import in_run
from .store_versions import content_hashes, sync_standby

checkpoints, events, runs, artifacts = CHECKPOINTS, EVENTS, RUNS, ARTIFACTS
# What may be moved to the trash: a complete checkpoint, or a save nobody will finish.
TRASHABLE = (CheckpointStatus.OK, CheckpointStatus.ABANDONED, CheckpointStatus.STANDBY)  # guard


class Acts(db.Facet):
    """The action writes (the `acts` facet)."""

    @contextmanager
    def audited(
        self,
        *,
        action: str,
        checkpoint_id: int | None,
        path: str,
        reason: str | None,
        size: int | None,
        actor: str,
        lease: HeldLease | None = None,
    ) -> Iterator[None]:
        """An audit event `planned` before the block, `done` after it, `failed` if it raises.
        `lease`: the run's lease the act runs under, confirmed in the same transaction."""
        with self._engine.begin() as conn:
            if lease is not None:
                lease.renew(conn)
            event_id = record_event(
                conn,
                action=action,
                checkpoint_id=checkpoint_id,
                path=path,
                reason=reason,
                size=size,
                actor=actor,
                state="planned",
                process=True,
            )
        try:
            yield
        except BaseException as exc:
            lines = str(exc).strip().splitlines()
            self._end_event(event_id, failed=lines[0] if lines else type(exc).__name__)
            raise
        self._end_event(event_id)

    def claim(
        self,
        checkpoint_id: int,
        *,
        action: str,
        reason: str | None,
        actor: str,
        trash: dict[str, Any] | None = None,
        lease: HeldLease | None = None,
        was: CheckpointStatus | None = None,
    ) -> tuple[int | None, str]:
        """Claim a checkpoint for a move to the trash (`action="trash"`, `trash`: where its
        files go) or for a purge, in one transaction: only an unpinned row still of status
        `was` (`ok`, or an abandoned save's) can be trashed, only an unpinned `trashed` row
        purged. The row takes its new status and the audit event is planned before any file
        moves. Returns (event id, "") or (None, why it was refused).
        `lease`: the run's lease, confirmed in the same transaction (LeaseLost if it is gone)."""
        was = was or CheckpointStatus.OK
        if action == "trash" and was not in TRASHABLE:
            return None, f"a {was.value} checkpoint is never trashed"
        status, new = (
            (was, CheckpointStatus.TRASHED)
            if action == "trash"
            else (CheckpointStatus.TRASHED, CheckpointStatus.PURGED)
        )
        with self._engine.begin() as conn:
            if lease is not None:
                lease.renew(conn)
            # PostgreSQL: the row locked to commit; one another transaction holds (a pin, a
            # claim) is skipped, not waited for: the act is refused, whoever wins decides.
            row = conn.execute(
                select(
                    checkpoints.c.status,
                    checkpoints.c.pinned,
                    checkpoints.c.path,
                    checkpoints.c.size_bytes,
                    checkpoints.c.version_of,
                )
                .where(checkpoints.c.id == checkpoint_id)
                .with_for_update(skip_locked=True)
            ).first()
            if row is None:
                there = conn.execute(
                    select(checkpoints.c.path).where(checkpoints.c.id == checkpoint_id)
                ).scalar()
                if there is not None:
                    return None, f"{there} is being changed by another process now"
                return None, "no longer in the catalog"
            if row.pinned:
                return None, f"{row.path} is pinned now"
            if row.status != status.value:
                return None, f"{row.path} is {row.status} now"
            patch_details(
                conn,
                checkpoint_id,
                {"trash": trash} if trash is not None else None,
                status=new.value,
                reason=reason if action == "trash" else "deleted from the trash",
            )
            sync_standby(conn, row.version_of or row.path)
            event_id = record_event(
                conn,
                action=action,
                checkpoint_id=checkpoint_id,
                path=row.path,
                reason=reason,
                size=row.size_bytes,
                actor=actor,
                state="planned",
                process=True,
            )
            return event_id, ""

    def end_claim(self, event_id: int, checkpoint_id: int, *, failed: str | None = None) -> None:
        """The claimed act is done, or failed (then the row gets its status back)."""
        with self._engine.begin() as conn:
            if failed is not None:
                action = conn.execute(
                    select(events.c.action).where(events.c.id == event_id)
                ).scalar()
                _unclaim(conn, checkpoint_id, str(action))
            close_event(conn, event_id, "failed" if failed else "done", failed)

    def _end_event(self, event_id: int, *, failed: str | None = None) -> None:
        with self._engine.begin() as conn:
            close_event(conn, event_id, "failed" if failed else "done", failed)

    def set_status(
        self,
        checkpoint_id: int,
        status: CheckpointStatus,
        reason: str | None,
        *,
        trash: dict[str, Any] | None = None,
        clear_trash: bool = False,
    ) -> None:
        """Move a row to trashed / ok (restored) / purged, keeping where its files went."""
        with self._engine.begin() as conn:
            if status not in RECORDS:
                free_path(conn, checkpoint_id)
            patch_details(
                conn,
                checkpoint_id,
                {"trash": trash} if trash is not None else None,
                drop=("trash",) if trash is None and clear_trash else (),
                status=status.value,
                reason=reason,
            )
            row = conn.execute(
                select(checkpoints.c.path, checkpoints.c.version_of).where(
                    checkpoints.c.id == checkpoint_id
                )
            ).first()
            if row is not None:
                sync_standby(conn, row.version_of or row.path)

    def add_artifact(
        self,
        checkpoint_id: int,
        *,
        kind: str,
        path: str,
        size: int,
        codec: str | None,
        digest: str | None,
    ) -> None:
        """Register a file we derived from a checkpoint (replacing an older one at that path);
        `digest` None: pending, registered before the file gets its name."""
        with self._engine.begin() as conn:
            conn.execute(delete(artifacts).where(artifacts.c.path == path))
            conn.execute(
                insert(artifacts).values(
                    checkpoint_id=checkpoint_id,
                    kind=kind,
                    path=path,
                    bytes=size,
                    codec=codec,
                    hash=digest,
                    created_at=now_iso(),
                )
            )

    def forget_artifact(self, path: str) -> None:
        """Drop the artifact row of `path` (a pending one whose file was never written)."""
        with self._engine.begin() as conn:
            conn.execute(delete(artifacts).where(artifacts.c.path == path))

    def artifact_owner(self, path: str) -> int | None:
        """The checkpoint id whose registered artifact is at `path` (None: no artifact there)."""
        found = self._read(select(artifacts.c.checkpoint_id).where(artifacts.c.path == path))
        return found[0][0] if found else None

    def ids_with_artifact(self, kind: str) -> set[int]:
        """Checkpoints with a finished artifact of `kind` (a pending row: a killed split)."""
        finished = (artifacts.c.kind == kind) & artifacts.c.hash.is_not(None)
        return {r[0] for r in self._read(select(artifacts.c.checkpoint_id).where(finished))}

    def record_rewrite(
        self, checkpoint_id: int, *, stat: FileStat, digest: str, codec: str
    ) -> None:
        """A checkpoint we rewrote in place (compressed): same content, new bytes on disk (the
        generation the trainer wrote is still the newest: it keeps its epoch, with our hash)."""
        with self._engine.begin() as conn:
            row = conn.execute(
                select(checkpoints.c.details, checkpoints.c.hash, checkpoints.c.path)
                .where(checkpoints.c.id == checkpoint_id)
                .with_for_update()
            ).one()
            generations = [dict(g) for g in (row.details or {}).get("generations") or []]
            before = sorted(content_hashes(row.hash, row.details) - {digest})
            if generations:  # its copies of the old bytes stay standby (`sync_standby`)
                generations[-1].update(hash=digest, rewritten_from=before)
            patch_details(
                conn,
                checkpoint_id,
                {"codec": codec, "generations": generations},
                size_bytes=stat.size,
                mtime_ns=stat.mtime_ns,
                inode=stat.inode,
                hash=digest,
            )
            sync_standby(conn, row.path)

    def artifact_paths(self, start: str) -> set[str]:
        """Paths of our derived files at or below `start`: never indexed as new checkpoints.
        (A `compressed` artifact is the checkpoint itself, rewritten: not one of them.)"""
        stmt = select(artifacts.c.path).where(
            artifacts.c.kind != "compressed", at_or_below(artifacts.c.path, start)
        )
        return {r[0] for r in self._read(stmt)}

    def set_pinned(self, checkpoint_id: int, pinned: bool, actor: str) -> bool:
        """Returns whether it changed."""
        with self._engine.begin() as conn:
            row = conn.execute(
                select(checkpoints.c.pinned, checkpoints.c.path)
                .where(checkpoints.c.id == checkpoint_id)
                .with_for_update()
            ).first()
            if row is None or bool(row.pinned) == pinned:
                return False
            conn.execute(
                update(checkpoints).where(checkpoints.c.id == checkpoint_id).values(pinned=pinned)
            )
            record_event(
                conn,
                action="pin" if pinned else "unpin",
                checkpoint_id=checkpoint_id,
                path=row.path,
                reason=None,
                size=None,
                actor=actor,
            )
        return True

    def trashed(self, *, include_pinned: bool = True) -> list[TrashedCheckpoint]:
        """Trashed checkpoints with where their files are and when they went (a pinned one is
        listed, never purged)."""
        stmt = (
            select(
                checkpoints.c.id,
                checkpoints.c.path,
                checkpoints.c.size_bytes.label("bytes"),
                checkpoints.c.reason,
                checkpoints.c.details,
                checkpoints.c.pinned,
                runs.c.name.label("run"),
                runs.c.root,
            )
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(checkpoints.c.status == CheckpointStatus.TRASHED.value)
            .order_by(checkpoints.c.id)
        )
        if not include_pinned:
            stmt = stmt.where(checkpoints.c.pinned.is_(False))
        return [
            to_record(
                TrashedCheckpoint,
                r,
                pinned=bool(r.pinned),
                trash=dict((r.details or {}).get("trash", {})),
            )
            for r in self._read(stmt)
        ]

    def audit_log(
        self,
        run: str | None = None,
        limit: int | None = None,
        *,
        action: str | None = None,
        state: str | None = None,
        actor: str | None = None,
    ) -> list[AuditEvent]:
        """The audit events, oldest first (the newest `limit` of them); `action`, `state`,
        `actor`: only those (compared in SQL: no other event is read)."""
        stmt = (
            select(events, runs.c.name.label("run"))
            .join(checkpoints, checkpoints.c.id == events.c.checkpoint_id, isouter=True)
            .join(runs, runs.c.id == checkpoints.c.run_id, isouter=True)
            .order_by(events.c.id.desc())
        )
        if run is not None:
            stmt = stmt.where(in_run(run))  # the run and the runs below it
        for column, wanted in (("action", action), ("state", state), ("actor", actor)):
            if wanted is not None:
                stmt = stmt.where(events.c[column] == wanted)
        if limit is not None:
            stmt = stmt.limit(limit)
        return [to_record(AuditEvent, r) for r in reversed(self._read(stmt))]


def _unclaim(conn: Any, checkpoint_id: int, action: str) -> None:
    trashed, purged = CheckpointStatus.TRASHED.value, CheckpointStatus.PURGED.value
    if action == "trash":
        free_path(conn, checkpoint_id)
        # A row without a hash (an abandoned save) is never made `ok`: read at the next scan.
        digest = conn.execute(
            select(checkpoints.c.hash).where(checkpoints.c.id == checkpoint_id)
        ).scalar()
        patch_details(
            conn,
            checkpoint_id,
            drop=("trash",),
            only_if_status=trashed,
            status=(CheckpointStatus.OK if digest else CheckpointStatus.INCOMPLETE).value,
            reason=None if digest else "left in place: read at the next scan",
        )
    elif action == "purge":
        conn.execute(
            update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id, checkpoints.c.status == purged)
            .values(status=trashed)
        )


def free_path(conn: Any, checkpoint_id: int) -> None:
    """A trash record goes back to its path: a `missing` (or `removed`) row of another file that
    was at that path meanwhile is forgotten (its events stay in the log), so the path stays
    unique."""
    path = select(checkpoints.c.path).where(checkpoints.c.id == checkpoint_id).scalar_subquery()
    conn.execute(
        delete(checkpoints).where(
            checkpoints.c.path == path,
            checkpoints.c.id != checkpoint_id,
            checkpoints.c.status.in_(
                (CheckpointStatus.MISSING.value, CheckpointStatus.REMOVED.value)
            ),
        )
    )
