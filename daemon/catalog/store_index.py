"""The indexer's writes and reads (the `index` facet): a checkpoint's row recorded (one short
BEGIN IMMEDIATE each), rows marked missing or unreadable, what the catalog knows under a root
to decide what to read again, what it says a checkpoint's files are."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import JSON, insert, select, type_coerce, update

from ..core.errors import NotFound
from ..core.model import CheckpointStatus, FileStat, IndexRecord
from . import change_feed, db
from .audit import now_iso, record_event
from .index_rows import row_values, sightings
from .schema import CHECKPOINTS, RECORDS, RUNS, at_or_below
from .store_claims import drop_claim
from .store_recovery import act_in_flight, move_in_flight
from .store_runs import replace_metrics, run_id_for
from .store_versions import sync_standby

checkpoints, runs = CHECKPOINTS, RUNS


@dataclasses.dataclass(frozen=True)
class Known:
    """What the catalog remembers of a path: enough to decide whether to read it again."""

    id: int
    stat: FileStat
    status: CheckpointStatus
    metrics_at: str | None


class Index(db.Facet):
    """The indexer's side of the catalog (the `index` facet)."""

    # ---- writes (one short BEGIN IMMEDIATE transaction each) ----

    def record(self, rec: IndexRecord, *, actor_name: str, at: str) -> int:
        """Insert or update the row for `rec.path`; replace its metrics; log an event.

        `at` is when the scan started: metrics files changed after it are re-read next time.
        A trashed or purged row is a record of other bytes: never updated here (a new file at
        its path gets a row of its own), and the trashed file itself, seen at its path while
        it is being moved or restored, is left to the mover (returns that row's id).
        """
        now = now_iso()
        with self._engine.begin() as conn:
            db.serialize(conn, "path", rec.path)  # its generation is a read-modify-write
            run_id = run_id_for(conn, rec.root, rec.run, now)
            row = conn.execute(
                select(
                    checkpoints.c.id,
                    checkpoints.c.hash,
                    checkpoints.c.generation,
                    checkpoints.c.status,
                    checkpoints.c.details,
                ).where(checkpoints.c.path == rec.path, checkpoints.c.status.not_in(RECORDS))
            ).first()
            if row is None:
                moving = conn.execute(
                    select(checkpoints.c.id).where(
                        checkpoints.c.path == rec.path,
                        checkpoints.c.status == CheckpointStatus.TRASHED.value,
                        checkpoints.c.size_bytes == rec.stat.size,
                        checkpoints.c.mtime_ns == rec.stat.mtime_ns,
                        checkpoints.c.inode == rec.stat.inode,
                    )
                ).scalar()
                if moving is not None:
                    return int(moving)
            values = row_values(rec, now)
            values["metrics_at"] = at
            if row is None:
                generation = 1
                values.update(run_id=run_id, first_seen_at=now, generation=1, pinned=False)
                values["details"]["generations"] = sightings([], rec, generation, now)
                ckpt_id = db.inserted_id(conn, insert(checkpoints).values(**values))
            else:
                ckpt_id = row.id
                seen = list((row.details or {}).get("generations") or [])
                # The bytes last read whole: a record without a hash between two generations
                # (the file caught empty or torn mid-save) must not hide the rewrite.
                previous = row.hash or (seen[-1].get("hash") if seen else None)
                rewritten = previous is not None and rec.hash is not None and previous != rec.hash
                if rewritten and act_in_flight(conn, rec.path, run_id, "compress"):
                    # Our compress swapped the file and has yet to record it (`record_rewrite`):
                    # the same content in new bytes, no trainer's save. Left to it.
                    drop_claim(conn, rec.path)
                    return int(row.id)
                generation = row.generation + int(rewritten)
                values.update(run_id=run_id, generation=generation)
                values["details"]["generations"] = sightings(seen, rec, generation, now)
                conn.execute(
                    update(checkpoints).where(checkpoints.c.id == ckpt_id).values(**values)
                )
            replace_metrics(conn, ckpt_id, rec.metrics)
            sync_standby(conn, rec.path)
            drop_claim(conn, rec.path)
            unchanged = row is not None and row.status == rec.status and row.hash == rec.hash
            if not unchanged:
                record_event(
                    conn,
                    action=str(rec.status) if rec.status != "ok" else "indexed",
                    checkpoint_id=ckpt_id,
                    path=rec.path,
                    reason=rec.reason,
                    size=rec.stat.size,
                    actor=actor_name,
                    at=now,
                )
            change_feed.announce(conn)  # `ckpt wait` on any host: at this commit
            return int(ckpt_id)

    def mark(
        self, ckpt_ids: Iterable[int], status: CheckpointStatus, reason: str, *, actor_name: str
    ) -> int:
        """Set the status of rows the scan could not look at again (gone, or unreadable now).
        Rows already in that status, trashed or purged meanwhile, or being moved to the trash
        now (another daemon's prune moved the file while this scan walked), are left as they
        are: one event per change."""
        ids = list(ckpt_ids)
        if not ids:
            return 0
        now = now_iso()
        with self._engine.begin() as conn:
            rows = conn.execute(
                select(checkpoints.c.id, checkpoints.c.path, checkpoints.c.run_id)
                .where(
                    checkpoints.c.id.in_(ids),
                    checkpoints.c.status.not_in((*RECORDS, status.value)),
                )
                .with_for_update()
            ).all()
            # Gone because a prune (this or another daemon's) is moving it to the trash now.
            rows = [r for r in rows if not move_in_flight(conn, r.path, r.run_id)]
            ids = [r.id for r in rows]
            if not ids:
                return 0
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id.in_(ids))
                .values(status=status.value, reason=reason)
            )
            for r in rows:
                sync_standby(conn, r.path)
                record_event(
                    conn,
                    action=status.value,
                    checkpoint_id=r.id,
                    path=r.path,
                    reason=reason,
                    size=None,
                    actor=actor_name,
                    at=now,
                )
            change_feed.announce(conn)
        return len(rows)

    def known_under(self, root: str, start: str | None = None) -> dict[str, Known]:
        """What the catalog has under `root`, or only at/below the path `start` inside it."""
        query = (
            select(
                checkpoints.c.id,
                checkpoints.c.path,
                checkpoints.c.size_bytes,
                checkpoints.c.mtime_ns,
                checkpoints.c.inode,
                checkpoints.c.status,
                checkpoints.c.metrics_at,
            )
            .join(runs, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root == root, checkpoints.c.status.not_in(RECORDS))
            .where(checkpoints.c.version_of.is_(None))  # kept versions: not in any walk
        )
        if start is not None and start != root:  # a range on the unique path index
            query = query.where(at_or_below(checkpoints.c.path, start))
        return {
            r.path: Known(
                r.id,
                FileStat(r.size_bytes, r.mtime_ns, r.inode),
                CheckpointStatus(r.status),
                r.metrics_at,
            )
            for r in self._read(query)
        }

    def trashed_in_place(self, root: str, start: str | None = None) -> dict[str, FileStat]:
        """The files under `root` (at or below `start`) trashed where they are (a root that
        cannot rename: `usecases.rail`), with the stat they were trashed with: not read again
        while they are still those bytes (they are in the trash, deleted when due)."""
        # The JSON test in SQL: a root's trash may hold thousands of rows, never read whole.
        in_place = type_coerce(checkpoints.c.details, JSON)[("trash", "in_place")].as_boolean()
        query = (
            select(checkpoints.c.path, checkpoints.c.details)
            .join(RUNS, runs.c.id == checkpoints.c.run_id)
            .where(runs.c.root == root, checkpoints.c.status == CheckpointStatus.TRASHED.value)
            .where(in_place.is_(True))
        )
        if start is not None and start != root:  # as `known_under`: a range on the path
            query = query.where(at_or_below(checkpoints.c.path, start))
        found = {}
        for row in self._read(query):
            trash = (row.details or {}).get("trash") or {}
            if trash.get("in_place") and trash.get("stat"):
                found[row.path] = FileStat(*trash["stat"])
        return found

    def quick_check(self) -> str | None:
        """SQLite's `PRAGMA quick_check` (its WAL-reset race is in the system's version range):
        None when fine or not SQLite, else what it reported."""
        if self._engine.dialect.name != "sqlite":
            return None
        with self._engine.connect() as conn:
            rows = [r[0] for r in conn.exec_driver_sql("PRAGMA quick_check").fetchall()]
        return None if rows == ["ok"] else "; ".join(map(str, rows))[:500]

    def identity(self, ckpt_id: int) -> tuple[FileStat, str | None, list[str]]:
        """What the catalog says a checkpoint's files are: (stat, hash, member names)."""
        found = self._read(
            select(
                checkpoints.c.size_bytes,
                checkpoints.c.mtime_ns,
                checkpoints.c.inode,
                checkpoints.c.hash,
                checkpoints.c.details,
            ).where(checkpoints.c.id == ckpt_id)
        )
        if not found:
            raise NotFound(f"no checkpoint {ckpt_id} in the catalog")
        row = found[0]
        files = list((row.details or {}).get("files") or [])
        return FileStat(row.size_bytes, row.mtime_ns, row.inode), row.hash, files
