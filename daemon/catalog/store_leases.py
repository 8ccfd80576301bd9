"""Run leases in the catalog: a destructive act takes its run's lease first (one transaction:
BEGIN IMMEDIATE on SQLite; on PostgreSQL an advisory lock on the run's lease, held to commit, so
two takers of a lease row that does not exist yet cannot both insert it). A lease records the
host and pid of its holder: one held by a dead process of this host is free at once; elsewhere
it is free once expired.

A lease is renewed while its work runs: `Leases.lease` starts a renewer thread that pushes the
expiry forward every quarter of its duration, so a long act (a split under a prune's lease) never
outlives it. A renewal only succeeds while the row is still this holder's (same holder, host,
pid); once it fails the lease is lost (another process took it after it expired, e.g. while this
one was stopped), and the work stops with LeaseLost: each act confirms the lease in the
transaction of its first write (`Store.claim`, `Store.audited`), or calls `HeldLease.check()`."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import LeaseHeld, LeaseLost
from ..fs import procfs
from . import db
from .audit import iso, now, this_process
from .schema import LEASES

leases = LEASES
RENEWALS_PER_TTL = 4  # a renewal may fail three times in a row (a busy catalog) and still hold


def dead_here(host: str | None, pid: int | None) -> bool:
    """A process recorded as (host, pid) that is certainly gone: on this host, pid not alive."""
    return host == this_process()[0] and pid is not None and not procfs.pid_alive(pid)


class HeldLease:
    """A run's lease held by this process, renewed by a thread until `stop()`."""

    def __init__(
        self,
        engine: Engine,
        run_id: int,
        holder: str,
        ttl_seconds: float,
        taken_from: tuple[str, int] | None,
    ) -> None:
        self._engine, self.run_id, self.holder = engine, run_id, holder
        self.ttl_seconds = ttl_seconds
        self.taken_from = taken_from  # the dead holder it was taken over from: settle its acts
        self._lost: str | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name=f"lease-run-{run_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def renew(self, conn: Any = None) -> None:
        """Confirm the lease is still ours and push its expiry forward, atomically (in `conn`'s
        transaction if given: an act's first write). LeaseLost if it is not ours any more."""
        if self._lost is not None:
            raise LeaseLost(f"stopped: run {self.run_id} is no longer ours: {self._lost}")
        host, pid = this_process()
        stmt = (
            update(leases)
            .where(
                leases.c.run_id == self.run_id,
                leases.c.holder == self.holder,
                leases.c.host == host,
                leases.c.pid == pid,
            )
            .values(expires_at=iso(now() + dt.timedelta(seconds=self.ttl_seconds)))
        )
        if conn is None:
            with self._engine.begin() as own:
                done = own.execute(stmt)
        else:
            done = conn.execute(stmt)
        if done.rowcount != 1:
            self._lost = "another process took its lease (or it was released)"
            raise LeaseLost(f"stopped: run {self.run_id} is no longer ours: {self._lost}")

    def check(self) -> None:
        """Before an act: the run must still be ours (LeaseLost if not). Renews the lease."""
        self.renew()

    def _renew_until_stopped(self) -> None:
        interval = self.ttl_seconds / RENEWALS_PER_TTL
        while not self._stopping.wait(interval):
            try:
                self.renew()
            except LeaseLost:
                return
            except SQLAlchemyError:  # a busy or locked catalog: the next tick tries again
                continue


class Leases:
    """The lease writes of `Store` (mixed in: they use its engine)."""

    _engine: Engine

    @contextmanager
    def lease(self, run_id: int, holder: str, ttl_seconds: float) -> Iterator[HeldLease]:
        """Hold the run's lease for the block, renewed while it runs (LeaseHeld, exit 4, if
        another process has it). Yields the held lease: `.check()` it before each act."""
        held = HeldLease(
            self._engine,
            run_id,
            holder,
            ttl_seconds,
            self.acquire_lease(run_id, holder, ttl_seconds),
        )
        held.start()
        try:
            yield held
        finally:
            held.stop()
            self.release_lease(run_id, holder)

    def acquire_lease(self, run_id: int, holder: str, ttl_seconds: float) -> tuple[str, int] | None:
        """Take the run's lease (atomically, see above); raise LeaseHeld if another has it.

        A lease of a dead process on this host is free at once. Returns the (host, pid) of such a
        dead holder when the lease was taken over from one (its planned acts need settling)."""
        moment = now()
        host, pid = this_process()
        with self._engine.begin() as conn:
            db.serialize(conn, "lease", run_id)
            row = conn.execute(select(leases).where(leases.c.run_id == run_id)).first()
            dead = row is not None and dead_here(row.host, row.pid)
            mine = row is not None and row.holder == holder
            if row is not None and not mine and not dead and row.expires_at > iso(moment):
                raise LeaseHeld(
                    f"run is being changed by {row.holder} (lease until {row.expires_at})"
                )
            values = {
                "holder": holder,
                "acquired_at": iso(moment),
                "expires_at": iso(moment + dt.timedelta(seconds=ttl_seconds)),
                "host": host,
                "pid": pid,
            }
            if row is None:
                conn.execute(insert(leases).values(run_id=run_id, **values))
            else:
                conn.execute(update(leases).where(leases.c.run_id == run_id).values(**values))
        return (row.host, row.pid) if dead and not mine and row is not None else None

    def drop_dead_leases(self) -> list[tuple[str, int]]:
        """Remove the leases of dead processes of this host; returns their (host, pid)."""
        host, _pid = this_process()
        with self._engine.begin() as conn:
            rows = conn.execute(select(leases).where(leases.c.host == host).with_for_update()).all()
            dead = [r for r in rows if dead_here(r.host, r.pid)]
            for r in dead:
                conn.execute(
                    delete(leases).where(leases.c.run_id == r.run_id, leases.c.holder == r.holder)
                )
        return [(r.host, r.pid) for r in dead]

    def release_lease(self, run_id: int, holder: str) -> None:
        host, pid = this_process()
        with self._engine.begin() as conn:
            conn.execute(
                delete(leases).where(
                    and_(
                        leases.c.run_id == run_id,
                        leases.c.holder == holder,
                        leases.c.host == host,
                        leases.c.pid == pid,
                    )
                )
            )
