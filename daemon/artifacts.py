"""Artifact use cases: split a checkpoint into an inference artifact, compress one in place.

The transforms (`daemon.transforms`) write, verify and atomically rename; this module holds the
rails around them, as for retention: the checkpoint must be `ok`, inside a configured root,
unchanged since it was indexed; the run's lease is held; an audit event is recorded before and
completed after; the result is registered in the catalog so the watcher and the indexer know
the artifact is ours (never indexed as an unrelated new checkpoint).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from daemon import fsops, guards, store_actions, store_leases
from daemon.config import Artifacts, Config
from daemon.errors import UsageError
from daemon.model import Checkpoint, CheckpointStatus
from daemon.store import Store

if TYPE_CHECKING:
    from daemon.transforms.compress import CompressResult
    from daemon.transforms.split import SplitResult

LEASE_SECONDS = 3600.0


def split_checkpoint(
    config: Config,
    store: Store,
    ref: str,
    *,
    out: Path | None = None,
    keep_compile: bool = False,
    actor: str,
    leased: bool = False,
) -> tuple[Checkpoint, SplitResult]:
    """`leased`: the caller (retention's demotion) already holds the run's lease."""
    from daemon.transforms.split import split

    c = store.get(ref)
    with _acting_on(config, store, c, "split", actor, leased=leased) as (root, _members):
        _check_out(root, out)
        result = split(root, Path(c.path), out=out, keep_compile=keep_compile)
        store_actions.add_artifact(
            store.engine,
            c.id,
            kind="inference",
            path=str(result.path),
            size=result.bytes,
            codec=None,
            digest=result.hash,
        )
    return store.get(str(c.id)), result


def compress_checkpoint(
    config: Config,
    store: Store,
    ref: str,
    *,
    codec: str = "gzip",
    level: int | None = None,
    shuffle: bool = True,
    actor: str,
) -> tuple[Checkpoint, CompressResult]:
    from daemon.transforms.compress import compress

    c = store.get(ref)
    with _acting_on(config, store, c, "compress", actor) as (root, members):
        result = compress(root, Path(c.path), codec=codec, level=level, shuffle=shuffle)
        stat = fsops.current_stat(root, members)
        store_actions.record_rewrite(
            store.engine, c.id, stat=stat, digest=result.hash, codec=result.codec
        )
        # The checkpoint itself, rewritten: recorded so the scheduled job compresses it once.
        store_actions.add_artifact(
            store.engine,
            c.id,
            kind="compressed",
            path=c.path,
            size=result.bytes_after,
            codec=result.codec,
            digest=result.hash,
        )
    return store.get(str(c.id)), result


@contextmanager
def _acting_on(
    config: Config, store: Store, c: Checkpoint, action: str, actor: str, *, leased: bool = False
) -> Iterator[tuple[Path, list[Path]]]:
    if c.status != CheckpointStatus.OK:
        raise UsageError(f"{c.path} is {c.status.value}: only ok checkpoints are {action}ed")
    if c.format in ("tf-checkpoint", "savedmodel"):
        raise UsageError(
            f"{c.path} is a {c.format}: {action} works on Keras HDF5 and .keras "
            "files (TF formats keep weights and optimizer state apart only in "
            "their object graph)"
        )
    root, members = guards.located(config, store, c)
    holder = f"{actor} pid {os.getpid()}"
    lease = (
        contextlib.nullcontext()
        if leased
        else store_leases.lease(store.engine, guards.run_id(store, c), holder, LEASE_SECONDS)
    )
    with lease as taken_from:
        if taken_from is not None:  # a killed command held it: settle what it left planned
            from daemon import recovery

            recovery.settle_events(config, store, of=taken_from)
        guards.recheck(store, c, root, members)
        with store_actions.audited(
            store.engine,
            action=action,
            checkpoint_id=c.id,
            path=c.path,
            reason=None,
            size=c.size_bytes,
            actor=actor,
        ):
            yield root, members


def _check_out(root: Path, out: Path | None) -> None:
    """An artifact stays in its checkpoint's root: only paths there are ever written."""
    if out is not None and not Path(os.path.abspath(out)).is_relative_to(root):
        raise fsops.Refused(f"--out {out} is not inside the checkpoint's root {root}")


SPLITTABLE = ("keras-v3-zip", "keras-v3-weights-h5", "keras-legacy-h5")
COMPRESSIBLE = (*SPLITTABLE, "keras-legacy-weights-h5")


def due(store: Store, cfg: Artifacts, now: float) -> tuple[list[Checkpoint], list[Checkpoint]]:
    """(to split, to compress): `ok` checkpoints old enough and not done yet, oldest first."""
    from daemon.query import ListQuery

    cold = store.list(ListQuery(status=CheckpointStatus.OK.value, sort="mtime"))
    split_done = store_actions.ids_with_artifact(store.engine, "inference")
    compressed = store_actions.ids_with_artifact(store.engine, "compressed")
    to_split = [
        c
        for c in cold
        if cfg.split_after is not None
        and now - c.mtime >= cfg.split_after
        and c.format in SPLITTABLE
        and (c.optimizer_bytes or 0) > 0
        and c.id not in split_done
    ]
    to_compress = [
        c
        for c in cold
        if cfg.compress_after is not None
        and now - c.mtime >= cfg.compress_after
        and c.format in COMPRESSIBLE
        and c.id not in compressed
    ]
    return to_split, to_compress
