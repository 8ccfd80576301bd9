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
transaction of its first write (`Acts.claim`, `Acts.audited`), or calls `HeldLease.check()`."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import LeaseHeld, LeaseLost
from ..fs import procfs
from . import db
from .audit import iso, this_process
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
        taken: tuple[int, tuple[str, int] | None],
    ) -> None:
        self._engine, self.run_id, self.holder = engine, run_id, holder
        token, taken_from = taken
        self.token = token  # the fencing token: an act confirms it in its first write
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
        if self._lost is None:
            with nullcontext(conn) if conn is not None else self._engine.begin() as renewing:
                moment = db.clock(renewing)  # the database's clock: hosts may disagree
                done = renewing.execute(
                    update(leases)
                    .where(
                        *_ours(self.run_id, self.holder, self.token),
                        leases.c.expires_at > iso(moment),  # expired: another may have it now
                    )
                    .values(expires_at=iso(moment + dt.timedelta(seconds=self.ttl_seconds)))
                )
                if done.rowcount != 1:
                    self._lost = _taken_by(renewing, self.run_id, self.token)
        if self._lost is not None:
            raise LeaseLost(f"stopped: run {self.run_id} is no longer ours: {self._lost}")

    @property
    def lost(self) -> str | None:
        """Why the lease is no longer ours, once a renewal found it so (no catalog read)."""
        return self._lost

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


def _ours(run_id: int, holder: str, token: int | None) -> tuple[Any, ...]:
    """SQL: the run's lease row while this process is its holder (with `token`, when given)."""
    host, pid = this_process()
    ours = [leases.c.run_id == run_id, leases.c.holder == holder]
    ours += [leases.c.host == host, leases.c.pid == pid]
    if token is not None:
        ours.append(leases.c.token == token)
    return tuple(ours)


def _taken_by(conn: Any, run_id: int, token: int) -> str:
    """Who holds the run's lease now, for the message of the one that lost it (token `token`)."""
    row = conn.execute(select(leases).where(leases.c.run_id == run_id)).first()
    if row is None:
        return "its lease was lost (its row is gone)"
    if row.token == token:  # nobody took it: it ran out while this process was not renewing
        return f"its lease expired at {row.expires_at} before it was renewed"
    node = f" on node {row.node}" if row.node else f" on host {row.host}" if row.host else ""
    return f"its lease was lost: now held by {row.holder}{node} (lease until {row.expires_at})"


class Leases(db.Facet):
    """The lease writes (the `leases` facet)."""

    @contextmanager
    def lease(
        self, run_id: int, holder: str, ttl_seconds: float, *, node: str | None = None
    ) -> Iterator[HeldLease]:
        """Hold the run's lease for the block, renewed while it runs (LeaseHeld, exit 4, if
        another process has it). Yields the held lease: `.check()` it before each act."""
        held = HeldLease(
            self._engine,
            run_id,
            holder,
            ttl_seconds,
            self.acquire_lease(run_id, holder, ttl_seconds, node=node),
        )
        held.start()
        try:
            yield held
        finally:
            held.stop()
            self.release_lease(run_id, holder, held.token)

    def acquire_lease(
        self, run_id: int, holder: str, ttl_seconds: float, *, node: str | None = None
    ) -> tuple[int, tuple[str, int] | None]:
        """Take the run's lease (atomically, see above); raise LeaseHeld if another has it.

        Expiry is judged by the database's clock (`db.clock`). A lease of a dead process on
        this host is free at once. Returns the new fencing token (the last one plus one) and
        the (host, pid) of a dead holder it was taken over from (its planned acts need
        settling), or None."""
        host, pid = this_process()
        with self._engine.begin() as conn:
            db.serialize(conn, "lease", run_id)
            moment = db.clock(conn)
            row = conn.execute(select(leases).where(leases.c.run_id == run_id)).first()
            dead = row is not None and dead_here(row.host, row.pid)
            mine = row is not None and row.holder == holder
            if row is not None and not mine and not dead and row.expires_at > iso(moment):
                raise LeaseHeld(
                    f"run is being changed by {row.holder}"
                    + (f" on node {row.node}" if row.node else "")
                    + f" (lease until {row.expires_at})"
                )
            token = (int(row.token or 0) if row is not None else 0) + 1
            values = {
                "holder": holder,
                "acquired_at": iso(moment),
                "expires_at": iso(moment + dt.timedelta(seconds=ttl_seconds)),
                "host": host,
                "pid": pid,
                "token": token,
                "node": node,
            }
            if row is None:
                conn.execute(insert(leases).values(run_id=run_id, **values))
            else:
                conn.execute(update(leases).where(leases.c.run_id == run_id).values(**values))
        taken_from = (row.host, row.pid) if row is not None and dead and not mine else None
        return token, taken_from

    def drop_dead_leases(self) -> list[tuple[str, int]]:
        """Free the held leases of dead processes of this host; returns their (host, pid)."""
        host, _pid = this_process()
        with self._engine.begin() as conn:
            moment = iso(db.clock(conn))
            rows = conn.execute(
                select(leases)
                .where(leases.c.host == host, leases.c.expires_at > moment)
                .with_for_update()
            ).all()
            dead = [r for r in rows if dead_here(r.host, r.pid)]
            for r in dead:  # expired, not deleted: the row keeps its token
                conn.execute(
                    update(leases)
                    .where(leases.c.run_id == r.run_id, leases.c.holder == r.holder)
                    .values(expires_at=moment)
                )
        return [(r.host, r.pid) for r in dead]

    def release_lease(self, run_id: int, holder: str, token: int | None = None) -> None:
        """Give the lease up: expired now, its row (and token) kept; only if it is still ours."""
        with self._engine.begin() as conn:
            moment = iso(db.clock(conn))
            conn.execute(
                update(leases).where(*_ours(run_id, holder, token)).values(expires_at=moment)
            )
