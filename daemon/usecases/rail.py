"""The one rail for every destructive act on a checkpoint's files.

Prune, purge, `trash restore`, `restore --version`, split and compress, the disk guard, the
space reserve, version capture, the remote tier (its upload in `acting_on`, then the local move)
and `ckpt fetch` all move, delete, send away or rewrite files through this module, and only
through it (`tests/unit/test_architecture.py` holds every other module to that). Each act
follows the same sequence: take the run's lease (its fencing token confirmed in the act's first
write; a lease taken over from a killed command settles what that command left planned), re-check
the file under it (`guards.recheck`: the bytes are the ones indexed and decided on), act through
the one filesystem mutator (`fs.fsops`, `fs.fsswap`, `fs.fsclone`, `fs.fsfetch`), and audit (an
event `planned` before the act, `done` or `failed` after it; a claim in the catalog where a pin
may race the act). Two acts only add or move files of ours and take no lease: version capture (a
new file, verified before it gets its name, right after the indexer recorded the generation)
and a crash's orphan version moved to the trash (no row to claim; its trash record at once).

What an act decides stays with its use case (which checkpoints retention dooms, what the guard
demotes, which generation a restore puts back); this module only carries the decision out.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from ..catalog.store import Acting, Reads, Recovery
from ..catalog.store_leases import HeldLease
from ..core.errors import Refused
from ..core.model import Checkpoint, CheckpointStatus, FileStat, Format, TrashedCheckpoint
from ..core.units import iso_utc
from ..formats import tf_state
from ..fs import fsclone, fsfetch, fsops, fsunpack
from ..fs.hashing import hash_files
from ..settings.config import Config, RootConfig
from . import guards, trash_found, trash_in_place
from .settlement import settle_events


def batch_name(kind: str = "", *, pid: bool = True) -> str:
    """A trash batch's folder name: when (UTC, so batches sort by time), then who moved it
    (`kind`: the guard, the reserve; this process's pid)."""
    tail = "-".join([part for part in (kind, str(os.getpid()) if pid else "") if part])
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{tail}"


@contextmanager
def run_lease(
    config: Config, store: Acting, run_id: int, actor: str, *, held: HeldLease | None = None
) -> Iterator[HeldLease]:
    """The run's lease for the block, renewed while it runs (LeaseHeld, exit 4, if another
    process has it); `held`: a lease the caller holds already (retention's demotion). A lease
    taken over from a killed command: what it left planned is settled first."""
    holder = f"{actor} pid {os.getpid()}"
    lease_of = (
        contextlib.nullcontext(held)
        if held is not None
        else store.leases.lease(run_id, holder, config.lease_seconds, node=config.node_name)
    )
    with lease_of as lease:
        if lease.taken_from is not None:
            settle_events(config, store.recovery, of=lease.taken_from)
        yield lease


def trash_checkpoint(
    config: Config,
    store: Acting,
    c: Checkpoint,
    *,
    reason: str,
    batch: str,
    actor: str,
    lease: HeldLease,
    with_artifacts: bool = True,
) -> None:
    """Move `c`'s files into its root's trash (batch `batch`) under the run's `lease`: re-checked,
    claimed (a pin committed first keeps the files), moved, the claim ended. `with_artifacts`:
    its inference artifact, card and exports go with it (a demotion leaves them in its place).
    A TF checkpoint is forgotten in its folder's `checkpoint` state file."""
    root, members = guards.located(config, store.index, c)
    guards.recheck(store.index, c, root, members)
    if with_artifacts:
        members = [*members, *_artifact_files(store.reads, root, c)]
    now = time.time()
    trash = {
        "paths": [
            str(root.joinpath(fsops.TRASH_DIR, batch, *fsops.relative_parts(root, m)))
            for m in members
        ],
        "at": iso_utc(now),
        "batch": batch,
        "members": [str(m) for m in members],
    }
    mode = trash_in_place.trash_mode(config, Path(c.path))
    if mode.in_place:  # known before the act: the claim records the delayed delete
        trash = trash_in_place.record(config, store.index, c, root, members, trash, now, mode.why)
    # The claim confirms the run's lease in its transaction: a prune whose lease was taken
    # over (it was stopped past the expiry) moves nothing more.
    event_id, refused = store.acts.claim(
        c.id, action="trash", reason=reason, actor=actor, trash=trash, lease=lease, was=c.status
    )
    if event_id is None:
        raise fsops.Refused(refused)
    try:
        trashed = [Path(p) for p in trash["paths"]]
        if not mode.in_place:
            trashed = fsops.move_to_trash(root, members, batch)
    except fsops.RenameUnsupported as exc:  # found by the act: the files stay where they are
        if mode.setting == "move":
            store.acts.end_claim(event_id, c.id, failed=guards.one_line(exc))
            raise
        trash = trash_in_place.record(
            config, store.index, c, root, members, trash, now, guards.one_line(exc)
        )
        trashed = [Path(p) for p in trash["paths"]]
    except BaseException as exc:
        store.acts.end_claim(event_id, c.id, failed=guards.one_line(exc))
        raise
    if [str(p) for p in trashed] != trash["paths"] or trash.get("in_place"):
        moved = {**trash, "paths": [str(p) for p in trashed]}
        store.acts.set_status(c.id, CheckpointStatus.TRASHED, reason, trash=moved)
    store.acts.end_claim(event_id, c.id)
    if c.format == Format.TF_CHECKPOINT:
        _forget_in_state_file(root, Path(c.path))


def _artifact_files(reads: Reads, root: Path, c: Checkpoint) -> list[Path]:
    """The files derived from `c` that are on disk (inference artifact, its card, a json+h5
    export): they go to the trash with it and come back with it."""
    found = []
    for a in reads.get(str(c.id)).details.get("artifacts", []):
        path = Path(a["path"])
        if a["kind"] == "compressed" or path == Path(c.path):  # the checkpoint itself
            continue
        try:
            if fsops.identity(root, path) is not None:
                found.append(path)
        except (fsops.Refused, OSError):  # outside the root or a vanished folder: left alone
            continue
    return found


def _forget_in_state_file(root: Path, prefix: Path) -> None:
    """Keep TF's `checkpoint` file naming checkpoints that exist (latest_checkpoint, resume)."""
    state = prefix.parent / tf_state.STATE_FILE
    try:
        text = state.read_text()
    except FileNotFoundError:
        return
    rewritten = tf_state.without(text, str(prefix.parent), str(prefix))
    if rewritten is not None:
        fsops.atomic_write(root, state, rewritten.encode())


def purge_trashed(
    config: Config, store: Acting, item: TrashedCheckpoint, actor: str, reason: str | None = None
) -> None:
    """Delete a trashed checkpoint's files for good, under its run's lease, claimed right
    before the unlink (a pin committed before it keeps the files). `reason`: why it is purged
    before its grace period (the disk guard's), for `ckpt log`."""
    root = guards.configured_root(config, item)
    with run_lease(config, store, store.recovery.run_of(item.id), actor) as lease:
        event_id, refused = store.acts.claim(
            item.id, action="purge", reason=reason, actor=actor, lease=lease
        )
        if event_id is None:
            raise fsops.Refused(refused)
        held = item.trash.get("members_stat") if item.trash.get("in_place") else None
        try:
            in_place = FileStat(*held) if held else None
            fsops.purge(root.path, [Path(p) for p in item.trash_paths], in_place=in_place)
        except BaseException as exc:
            store.acts.end_claim(event_id, item.id, failed=guards.one_line(exc))
            raise
        store.acts.end_claim(event_id, item.id)


def remove_artifact(
    config: Config, store: Acting, c: Checkpoint, path: Path, *, reason: str, actor: str
) -> None:
    """An artifact of ours beside `c` (whole at its path: the artifact is a second copy of its
    weights) removed, under the run's lease, audited (`remove-artifact`): moved to the trash,
    its row forgotten, then purged. Killed in between, the file left in the trash is adopted and
    purged by the next reconcile of the trash; a row whose file is gone is only forgotten."""
    root = guards.configured_root(config, c).path
    with (
        run_lease(config, store, guards.run_id(store.reads, c), actor) as lease,
        audited(
            store, c, "remove-artifact", actor, lease, path=str(path), reason=reason, size=None
        ),
    ):
        if store.acts.artifact_owner(str(path)) != c.id:
            raise fsops.Refused(f"{path} is not an artifact of {c.path} now: left alone")
        held, trashed = fsops.identity(root, path), []
        try:
            trashed = fsops.move_to_trash(root, [path], batch_name("guard")) if held else []
        except fsops.RenameUnsupported:  # a root that cannot rename: deleted where it is
            in_place = fsops.current_stat(root, [path])
            store.acts.forget_artifact(str(path))
            fsops.purge(root, [path], in_place=in_place)
            return
        store.acts.forget_artifact(str(path))
        fsops.purge(root, trashed)


def restore_trashed(config: Config, store: Acting, c: Checkpoint, actor: str) -> None:
    """Put a trashed checkpoint's files back where they were, under its run's lease, audited
    (`restore`); never over a file that is there now (fsops)."""
    info = c.details.get("trash") or {}
    root = guards.configured_root(config, c).path
    fsops.remove_stale_temps(Path(c.path).parent, recursive=False)  # of killed commands
    with (
        run_lease(config, store, guards.run_id(store.reads, c), actor) as lease,
        audited(store, c, "restore", actor, lease, size=c.size_bytes),
    ):
        originals = [Path(p) for p in info["members"]]
        if not info.get("in_place"):
            fsops.restore(root, [Path(p) for p in info["paths"]], originals)
        elif fsops.current_stat(root, originals) != FileStat(*info["members_stat"]):
            raise Refused(f"{c.path} changed since it was trashed: its trashed bytes are gone")
        # A record found in the trash was never read: the next scan reads it.
        status = CheckpointStatus.OK if c.hash else CheckpointStatus.INCOMPLETE
        reason = None if c.hash else "restored from the trash: read at the next scan"
        store.acts.set_status(c.id, status, reason, clear_trash=True)


def audited(
    store: Acting,
    c: Checkpoint,
    action: str,
    actor: str,
    lease: HeldLease | None,
    *,
    size: int | None,
    reason: str | None = None,
    path: str | None = None,
) -> AbstractContextManager[None]:
    """The audit event `action` of an act on `c` of `size` bytes (`Acts.audited`: `planned`,
    then `done` or `failed`), the run's `lease` confirmed in its first write; at `c`'s path
    unless told another."""
    return store.acts.audited(
        action=action,
        checkpoint_id=c.id,
        path=c.path if path is None else path,
        reason=reason,
        size=size,
        actor=actor,
        lease=lease,
    )


@contextmanager
def acting_on(
    config: Config,
    store: Acting,
    c: Checkpoint,
    action: str,
    actor: str,
    *,
    leased: HeldLease | None = None,
    reason: str | None = None,
    rehash: bool = True,
) -> Iterator[tuple[Path, list[Path]]]:
    """The rail of an act that writes beside or over a checkpoint (split, its card, an export,
    compress) or sends it away (the tier's upload): the run's lease (`leased`: one the caller
    holds), the file re-checked under it (`rehash` False: the stat only, for an act that hashes
    every byte it reads), an audit event `action` (with `reason`) around the block. Yields (its
    root, its files); the transforms the block runs write through `fsops.rewrite`."""
    root, members = guards.located(config, store.index, c)
    fsops.remove_stale_temps(Path(c.path).parent, recursive=False)  # of killed commands
    # The lease is renewed while the transform runs (a split of a large file takes long).
    with run_lease(config, store, guards.run_id(store.reads, c), actor, held=leased) as lease:
        guards.recheck(store.index, c, root, members, rehash=rehash)
        with audited(store, c, action, actor, lease, size=c.size_bytes, reason=reason):
            yield root, members


def copy_generation(
    root: RootConfig, original: Path, target: Path, verify: Callable[[Path], None]
) -> str:
    """Version capture's act: a new file `target` (never replacing one) holding `original`'s
    bytes, `verify`-ed before it gets its name. It takes no lease: it only adds a file of ours,
    and runs right after the indexer recorded the generation (the copy races the trainer's next
    save, which `verify` catches). Returns how it was copied (reflink or copy)."""
    return fsclone.clone_new(root.path, original, target, verify)


def trash_unrecorded(
    recovery: Recovery, root: RootConfig, path: Path, *, digest: str | None, reason: str
) -> Path:
    """A file of ours no row knows (a version file a crash left without its row) moved to the
    trash, never deleted, and given its trash record at once (killed before it, the next
    reconcile of the trash makes it). Returns where it went."""
    batch = batch_name("orphan-versions", pid=False)
    [trashed] = fsops.move_to_trash(root.path, [path], batch)
    trash_found.adopt_file(recovery, root, batch, trashed, digest=digest, reason=reason)
    return trashed


def put_version_back(
    config: Config,
    store: Acting,
    root: RootConfig,
    path: Path,
    current: Checkpoint,
    version: Checkpoint,
    *,
    here: fsops.Identity,
    reason: str,
    actor: str,
) -> None:
    """`restore --version`'s act, under the run's lease: the kept `version` copied beside
    `path` (the file of `current`), verified against the hash it was kept with, and swapped in
    atomically only if that file is still `here`, the file the caller re-checked (a trainer's
    save meanwhile wins); audited (`restore-version`). The lease is taken after the caller kept
    the current generation (that capture may purge versions in the trash, under their runs'
    leases: leases do not nest)."""
    with (
        run_lease(config, store, guards.run_id(store.reads, current), actor) as lease,
        audited(
            store,
            current,
            "restore-version",
            actor,
            lease,
            path=str(path),
            reason=reason,
            size=version.size_bytes,
        ),
        fsops.rewrite(root.path, path, like=Path(version.path), replacing=here) as temp,
    ):
        fsclone.copy_into(root.path, Path(version.path), temp)
        if hash_files([temp], root.path) != version.hash:
            raise Refused(f"version {version.path} does not hold the bytes it was kept with")


def receive_checkpoint(
    config: Config,
    store: Acting,
    c: Checkpoint,
    chunks: Iterable[bytes],
    actor: str,
    source: str,
    *,
    archive: bool = False,
) -> None:
    """A trashed or purged checkpoint's bytes streamed back (`ckpt fetch`, from `source`) to
    its own path, under its run's lease, audited (`fetch`): checked against the catalog's hash
    and published without replacing anything (`fs.fsfetch`; `archive`: the tar of its files,
    unpacked by `fs.fsunpack`); the row `ok` again with the new files' identity."""
    root = guards.configured_root(config, c).path
    fsops.remove_stale_temps(Path(c.path).parent, recursive=False)  # of killed fetches
    with (
        run_lease(config, store, guards.run_id(store.reads, c), actor) as lease,
        audited(store, c, "fetch", actor, lease, size=c.size_bytes, reason=f"from {source}"),
    ):
        expected, digest, files = store.index.identity(c.id)
        if archive:
            folder = Path(c.path).parent
            fsunpack.receive_tree(
                folder,
                files,
                chunks,
                expected_hash=digest or "",
                expected_bytes=expected.size,
                root=root,
                mtime_ns=expected.mtime_ns,
            )
            stat = fsops.current_stat(root, [folder / name for name in files])
        else:
            info = fsfetch.receive(
                Path(c.path),
                chunks,
                expected_hash=digest or "",
                root=root,
                mtime_ns=expected.mtime_ns,
            )
            stat = FileStat(info.st_size, info.st_mtime_ns, info.st_ino)
        store.acts.set_status(c.id, CheckpointStatus.OK, None, clear_trash=True)
        store.remote.set_fetched(c.id, stat)


def receive_copy(
    config: Config,
    target: Path,
    chunks: Iterable[bytes],
    expected_hash: str,
    *,
    files: list[str] | None = None,
    size: int = 0,
) -> None:
    """A checkpoint's bytes streamed to a new file of the user's (`ckpt fetch --to`): checked
    against the catalog's hash, never over an existing file; beneath its root when inside one.
    `files`: the tar of these recorded files (`size` bytes), unpacked into the folder `target`.
    No catalog row changes, so no lease."""
    inside = config.root_for(target)
    root = inside.path if inside else None
    if files is not None:
        fsunpack.receive_tree(
            target, files, chunks, expected_hash=expected_hash, expected_bytes=size, root=root
        )
        return
    fsfetch.receive(target, chunks, expected_hash=expected_hash, root=root)
