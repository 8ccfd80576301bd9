"""`ckpt verify --remote`: is each verified remote copy still the object we recorded? Each is
read back (`HEAD` with checksums): its size, the checksum the service reports of it and our
BLAKE3 in its metadata, against the catalog's record. A copy gone from the store is marked
`missing`, one with other bytes or metadata `changed` (with the reason and an audit event):
from then on it is never trusted (listings stop calling it a copy, `ckpt fetch` refuses it,
its local copy is never freed on its account). A mismatch is reported, never "fixed"; a copy
that matches has its `verified_at` renewed.

The same read-back guards the last local copy: `trash purge` (and the disk guard's early purge)
of a checkpoint whose only other copy is remote reads that copy back first (`before_purge`),
and the service reads back a sample of the copies verified longest ago on a schedule
(`verify_sample`: `schedule.remote_verify`, `schedule.remote_sample`), so `location` does not
say `remote` for days after the object went.
"""

from __future__ import annotations

from ...catalog.store import Acting, Acts, Reads, RemoteCopies
from ...core.errors import CkptError
from ...core.model import Checkpoint
from ...core.remote import RemoteCopy, RemoteState, verified_copy
from ...remote.store import RemoteObject
from ...settings.config import Config
from .. import guards
from ..verifier import Verdict
from .locations import uses_remote
from .tiering import object_store, remote_of


def differences(
    found: RemoteObject | None, copy: RemoteCopy, *, checksum: bool = True
) -> str | None:
    """What the object `found` under a copy's key has that the recorded copy has not (None:
    it is the copy). `checksum`: also the service's checksum (a server-side copy, the remote
    trash's, may carry a checksum of its own)."""
    if found is None:
        return "not in the store"
    problems = []
    if found.size != copy.size_bytes:
        problems.append(f"size {found.size}, recorded {copy.size_bytes}")
    if found.content_hash != copy.content_hash:
        problems.append(f"metadata hash {found.content_hash}, recorded {copy.content_hash}")
    if checksum and copy.checksum:
        reported = found.checksum or "none"
        if reported != copy.checksum:
            problems.append(f"service checksum {reported}, recorded {copy.checksum}")
    return "; ".join(problems) or None


def verify_remote(
    config: Config,
    reads: Reads,
    acts: Acts,
    remote_copies: RemoteCopies,
    refs: list[str],
    *,
    actor: str,
) -> list[Verdict]:
    """One verdict per verified remote copy of `refs` (ids or paths; none: every copy)."""
    if refs:
        wanted = [reads.get(ref) for ref in refs]
        copies = remote_copies.remote_copies(c.id for c in wanted)
        rows = {c.id: c for c in wanted}
    else:
        copies = remote_copies.remote_copies()
        rows = {}
    verdicts = []
    for copy in copies:
        if copy.state != RemoteState.VERIFIED:
            continue
        c = rows.get(copy.checkpoint_id) or reads.get(str(copy.checkpoint_id))
        verdicts.append(_verify_one(config, acts, remote_copies, c, copy, actor))
    return verdicts


def verify_sample(
    config: Config, reads: Reads, acts: Acts, remote_copies: RemoteCopies, count: int, *, actor: str
) -> list[Verdict]:
    """The `count` verified remote copies verified longest ago, each read back (the service's
    `remote_verify` job: every copy in turn, a sample per pass)."""
    copies = [c for c in remote_copies.remote_copies() if c.state == RemoteState.VERIFIED]
    copies.sort(key=lambda c: (c.verified_at, c.id))
    return [
        _verify_one(config, acts, remote_copies, reads.get(str(copy.checkpoint_id)), copy, actor)
        for copy in copies[:count]
    ]


def before_purge(config: Config, store: Acting, checkpoint_id: int, *, actor: str) -> str | None:
    """Why the trashed checkpoint's local copy must not be purged now: its verified remote copy,
    read back this moment, is gone or other bytes (it is marked so: never trusted again), or the
    store cannot be reached to tell. None: it matches, or there is none (then the trash copy is
    not held on its account)."""
    if not uses_remote(config):  # no store configured: no copy of ours is anywhere else
        return None
    copy = verified_copy(store.remote.remote_copies([checkpoint_id]))
    if copy is None:
        return None
    c = store.reads.get(str(checkpoint_id))
    verdict = _verify_one(config, store.acts, store.remote, c, copy, actor)
    if verdict.ok:
        return None
    return f"not purged, the local copy is the last one: {verdict.detail}"


def _verify_one(
    config: Config,
    acts: Acts,
    remote_copies: RemoteCopies,
    c: Checkpoint,
    copy: RemoteCopy,
    actor: str,
) -> Verdict:
    try:
        _root, remote = remote_of(config, c)
        found = object_store(remote).head(copy.key)
    except CkptError as exc:  # unreachable: said, nothing marked
        return Verdict(c.id, c.path, False, f"remote {copy.url}: {guards.one_line(exc)}")
    problem = differences(found, copy)
    if problem is None:
        remote_copies.set_remote_state(copy.id, RemoteState.VERIFIED)  # its verified_at: now
        return Verdict(c.id, c.path, True, f"remote copy matches: {copy.url}")
    state = RemoteState.MISSING if found is None else RemoteState.CHANGED
    reason = f"found by verify --remote: {problem}"
    with acts.audited(
        action="verify-remote",
        checkpoint_id=c.id,
        path=c.path,
        reason=f"{copy.url} {state.value}: {problem}",
        size=copy.size_bytes,
        actor=actor,
    ):
        remote_copies.set_remote_state(copy.id, state, reason)
    return Verdict(
        c.id, c.path, False, f"remote copy {state.value} ({problem}): {copy.url}: never trusted"
    )
