"""A run's lease is renewed while its work runs, and work that lost its lease stops.

Real processes on one real catalog (SQLite, PostgreSQL), with leases of a second or so: a holder
whose work is one long call keeps its lease far past the lease's duration (a second process
cannot take it; SQLite only, the renewal is the same UPDATE on both and this test is the
longest); a holder that stops renewing (SIGSTOP: alive, not dead) loses it once it expires, the
second process takes it, and the first, resumed, does no further step; a killed holder's lease
is free at once; an act whose lease was taken over writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ckpt_daemon.catalog.audit import now_iso
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import LeaseHeld, LeaseLost
from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord
from ckpt_daemon.core.query import ListQuery
from tests.support.catalogs import sql
from tests.support.pausing import stop_between_transactions

TTL = 1.0

# The holder: takes the run's lease, then works in `steps` steps of `step_seconds` each (one
# uninterrupted sleep: a long split or compress is one call), confirming its lease after each.
HOLDER = """
import os, sys, time
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import LeaseLost

url, run_id, ttl, steps, step_seconds = sys.argv[1:]
store = Store(url)
with store.leases.lease(int(run_id), f"holder pid {os.getpid()}", float(ttl)) as lease:
    print("held", flush=True)
    for i in range(int(steps)):
        time.sleep(float(step_seconds))
        try:
            lease.check()
        except LeaseLost as exc:
            print("lost", i, exc, flush=True)
            sys.exit(4)
        print("step", i, flush=True)
print("done", flush=True)
"""


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[tuple[str, Store, int]]:
    url = catalog_url
    store = Store(url)
    ckpt_id = store.index.record(
        IndexRecord(
            path="/r/run/a.h5",
            root="/r",
            run="run",
            status=CheckpointStatus.OK,
            reason=None,
            stat=FileStat(10, 1, 1),
            hash="h",
        ),
        actor_name="test",
        at="2026-01-01T00:00:00.000Z",
    )
    (run_id, _root, _name), *_ = store.reads.run_keys()
    assert ckpt_id and run_id
    yield url, store, run_id
    store.close()


def start_holder(
    url: str, run_id: int, steps: int, step_seconds: float, ttl: float = TTL
) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(run_id), str(ttl), str(steps), str(step_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "held":
        with holder:  # its pipes closed, it reaped
            holder.kill()
            raise AssertionError(holder.stderr.read() if holder.stderr else "")
    return holder


def lease_row(url: str, run_id: int) -> tuple[str, int] | None:
    """The run's lease while it is held (a released one keeps its row, expired: its token)."""
    rows = sql(
        url,
        "SELECT holder, pid FROM leases WHERE run_id = :run AND expires_at > :now",
        {"run": run_id, "now": now_iso()},
    )
    return None if not rows else (rows[0][0], rows[0][1])


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_a_lease_is_renewed_while_one_long_call_runs(catalog: tuple[str, Store, int]) -> None:
    url, store, run_id = catalog
    # 2 s, renewed every 0.5 s: a renewer starved for a second on a loaded 2-core machine (the
    # holder's SQLite write waiting behind ours) once lost a 1 s lease here. The one call still
    # runs 8 s, and the lease is still tried long past its own duration.
    ttl = 2 * TTL
    holder = start_holder(url, run_id, steps=1, step_seconds=4 * ttl, ttl=ttl)
    try:
        started = time.monotonic()
        tries = 0
        while time.monotonic() - started < 3 * ttl:  # long past the lease's own duration
            time.sleep(ttl / 2)
            with pytest.raises(LeaseHeld, match="holder pid"):
                store.leases.acquire_lease(run_id, f"second pid {os.getpid()}", ttl)
            tries += 1
        assert tries >= 4
        out, err = holder.communicate(timeout=30)
    finally:
        with holder:  # its pipes closed, it reaped
            holder.kill()
    assert holder.returncode == 0, err
    assert out.split() == ["step", "0", "done"]
    assert lease_row(url, run_id) is None  # released at the end
    store.leases.acquire_lease(run_id, f"second pid {os.getpid()}", TTL)


def test_a_stopped_holder_loses_its_lease_and_does_no_further_step(
    catalog: tuple[str, Store, int],
) -> None:
    url, store, run_id = catalog
    ttl = 3.0  # long enough for the first refusal below on a busy machine
    holder = start_holder(url, run_id, steps=600, step_seconds=0.1, ttl=ttl)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["step", "0"]
        stop_between_transactions(holder.pid, url)  # alive: not free at once, once expired
        with pytest.raises(LeaseHeld):
            store.leases.acquire_lease(run_id, f"second pid {os.getpid()}", 60)
        time.sleep(ttl + 0.5)
        token, taken_from = store.leases.acquire_lease(run_id, f"second pid {os.getpid()}", 60)
        assert taken_from is None  # taken because it expired, not from a dead process
        assert token == 2  # the fencing token only grows: the stopped holder had 1
        os.kill(holder.pid, signal.SIGCONT)
        out, err = holder.communicate(timeout=30)
    finally:
        with holder:  # its pipes closed, it reaped
            holder.kill()
    assert holder.returncode == 4, err
    lines = out.splitlines()
    assert lines[-1].startswith("lost ") and "no longer ours" in lines[-1], out
    done = 1 + sum(ln.startswith("step") for ln in lines)  # step 0 was read above
    # The step it was in when stopped is the one that found the lease gone: no step after it.
    assert done == int(lines[-1].split()[1])
    assert lease_row(url, run_id) == (f"second pid {os.getpid()}", os.getpid())  # not released


def test_a_killed_holders_lease_is_free_at_once(catalog: tuple[str, Store, int]) -> None:
    url, store, run_id = catalog
    with start_holder(url, run_id, steps=1, step_seconds=60) as holder:  # its pipes closed
        holder.kill()
        holder.wait(timeout=30)
    _token, taken_from = store.leases.acquire_lease(run_id, f"second pid {os.getpid()}", 60)
    assert taken_from is not None and taken_from[1] == holder.pid


def test_an_act_whose_lease_was_taken_over_writes_nothing(
    catalog: tuple[str, Store, int],
) -> None:
    url, store, run_id = catalog
    (ckpt,) = [c.id for c in store.reads.list(ListQuery())]
    with store.leases.lease(run_id, f"me pid {os.getpid()}", 60) as lease:
        sql(  # as a takeover writes it
            url,
            "UPDATE leases SET holder = 'other pid 1', host = 'elsewhere', pid = 1"
            " WHERE run_id = :run",
            {"run": run_id},
        )
        with pytest.raises(LeaseLost):
            store.acts.claim(
                ckpt, action="trash", reason="test", actor="test", trash={}, lease=lease
            )
        with (
            pytest.raises(LeaseLost),
            store.acts.audited(
                action="split",
                checkpoint_id=ckpt,
                path="/r/run/a.h5",
                reason=None,
                size=10,
                actor="test",
                lease=lease,
            ),
        ):
            raise AssertionError("the act ran without its lease")
        with pytest.raises(LeaseLost):
            lease.check()
    assert [c.status for c in store.reads.list(ListQuery())] == [CheckpointStatus.OK]
    assert [e.action for e in store.acts.audit_log()] == ["indexed"]
    assert lease_row(url, run_id) == ("other pid 1", 1)  # the new holder's lease stays


RACER = """
import os, sys
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.errors import LeaseHeld

store = Store(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()  # all take at once
try:
    store.leases.acquire_lease(int(sys.argv[2]), f"racer pid {os.getpid()}", 60)
    print("took", flush=True)
except LeaseHeld:
    print("held", flush=True)
"""


def test_racers_for_a_new_lease_one_takes_it(catalog: tuple[str, Store, int]) -> None:
    """No lease row yet: takers at the same moment (PostgreSQL's READ COMMITTED would let them
    all see none and insert) get exactly one holder and LeaseHeld for the rest, no error."""
    url, _store, run_id = catalog
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, str(run_id)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        results = [racer.communicate(timeout=120) for racer in racers]
    finally:
        for racer in racers:
            with racer:  # its pipes closed, it reaped
                racer.kill()
    assert all(r.returncode == 0 for r in racers), [err for _out, err in results]
    assert sorted(out.strip() for out, _err in results) == ["held", "held", "held", "took"]
    row = lease_row(url, run_id)
    assert row is not None and row[0].startswith("racer pid ")


@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_a_claim_skips_a_row_another_transaction_holds(catalog: tuple[str, Store, int]) -> None:
    """PostgreSQL: a claim does not wait for a row another transaction has locked (SKIP
    LOCKED): it is refused with why, and succeeds once that transaction ends."""
    from sqlalchemy import create_engine, text

    url, store, _run_id = catalog
    (ckpt,) = [c.id for c in store.reads.list(ListQuery())]
    other = create_engine(url)
    try:
        with other.begin() as conn:
            conn.execute(text("SELECT id FROM checkpoints WHERE id = :id FOR UPDATE"), {"id": ckpt})
            event, why = store.acts.claim(ckpt, action="trash", reason="t", actor="t", trash={})
            assert event is None and "being changed by another process now" in why
        event, why = store.acts.claim(ckpt, action="trash", reason="t", actor="t", trash={})
        assert event is not None and why == ""
    finally:
        other.dispose()


def test_a_newer_token_fences_off_an_act_of_the_same_holder(
    catalog: tuple[str, Store, int],
) -> None:
    """A takeover bumps the token: an act holding the old token writes nothing, even if the
    new holder has this holder's very name, host and pid (a restart reusing a pid, a clock
    that let the old expiry pass): the token alone fences it."""
    url, store, run_id = catalog
    (ckpt,) = [c.id for c in store.reads.list(ListQuery())]
    with store.leases.lease(run_id, f"me pid {os.getpid()}", 60, node="node-a") as lease:
        assert lease.token >= 1
        sql(url, "UPDATE leases SET token = token + 1 WHERE run_id = :run", {"run": run_id})
        with pytest.raises(LeaseLost):
            store.acts.claim(
                ckpt, action="trash", reason="test", actor="test", trash={}, lease=lease
            )
    assert [c.status for c in store.reads.list(ListQuery())] == [CheckpointStatus.OK]
    token = lease.token
    next_token, _taken = store.leases.acquire_lease(
        run_id, f"me pid {os.getpid()}", 60, node="node-b"
    )
    assert next_token == token + 2  # never reused, never lower, across releases
    store.leases.release_lease(run_id, f"me pid {os.getpid()}", next_token)
    assert store.leases.acquire_lease(run_id, "another pid 1", 60)[0] == token + 3  # released: free
