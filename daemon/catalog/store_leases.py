"""Run leases in the catalog: a destructive act takes its run's lease first (one transaction,
BEGIN IMMEDIATE). A lease records the host and pid of its holder: one held by a dead process of
this host is free at once; elsewhere it is free once expired (long acts renew it)."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, and_, delete, insert, select, update

from ..core.errors import LeaseHeld
from ..core.units import iso_utc
from ..fs import procfs
from .schema import LEASES

leases = LEASES


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(moment: dt.datetime) -> str:
    return iso_utc(moment.timestamp())


def this_process() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def dead_here(host: str | None, pid: int | None) -> bool:
    """A process recorded as (host, pid) that is certainly gone: on this host, pid not alive."""
    return host == socket.gethostname() and pid is not None and not procfs.pid_alive(pid)


def acquire_lease(
    engine: Engine, run_id: int, holder: str, ttl_seconds: float
) -> tuple[str, int] | None:
    """Take the run's lease (atomically: BEGIN IMMEDIATE); raise LeaseHeld if another has it.

    A lease of a dead process on this host is free at once. Returns the (host, pid) of such a
    dead holder when the lease was taken over from one (its planned acts need settling)."""
    now = _now()
    host, pid = this_process()
    with engine.begin() as conn:
        row = conn.execute(select(leases).where(leases.c.run_id == run_id)).first()
        dead = row is not None and dead_here(row.host, row.pid)
        mine = row is not None and row.holder == holder
        if row is not None and not mine and not dead and row.expires_at > _iso(now):
            raise LeaseHeld(f"run is being changed by {row.holder} (lease until {row.expires_at})")
        values = {
            "holder": holder,
            "acquired_at": _iso(now),
            "expires_at": _iso(now + dt.timedelta(seconds=ttl_seconds)),
            "host": host,
            "pid": pid,
        }
        if row is None:
            conn.execute(insert(leases).values(run_id=run_id, **values))
        else:
            conn.execute(update(leases).where(leases.c.run_id == run_id).values(**values))
    return (row.host, row.pid) if dead and not mine and row is not None else None


@contextmanager
def lease(
    engine: Engine, run_id: int, holder: str, ttl_seconds: float
) -> Iterator[tuple[str, int] | None]:
    """Hold the run's lease for the block (LeaseHeld, exit 4, if another process has it).
    Yields the dead holder it was taken over from, if any."""
    taken_from = acquire_lease(engine, run_id, holder, ttl_seconds)
    try:
        yield taken_from
    finally:
        release_lease(engine, run_id, holder)


def drop_dead_leases(engine: Engine) -> list[tuple[str, int]]:
    """Remove the leases of dead processes of this host; returns their (host, pid)."""
    host, _pid = this_process()
    with engine.begin() as conn:
        rows = conn.execute(select(leases).where(leases.c.host == host)).all()
        dead = [r for r in rows if dead_here(r.host, r.pid)]
        for r in dead:
            conn.execute(
                delete(leases).where(leases.c.run_id == r.run_id, leases.c.holder == r.holder)
            )
    return [(r.host, r.pid) for r in dead]


def renew_lease(engine: Engine, run_id: int, holder: str, ttl_seconds: float) -> None:
    """Push a held lease's expiry forward (long acts renew it as they go)."""
    until = _iso(_now() + dt.timedelta(seconds=ttl_seconds))
    with engine.begin() as conn:
        conn.execute(
            update(leases)
            .where(leases.c.run_id == run_id, leases.c.holder == holder)
            .values(expires_at=until)
        )


def release_lease(engine: Engine, run_id: int, holder: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            delete(leases).where(and_(leases.c.run_id == run_id, leases.c.holder == holder))
        )
