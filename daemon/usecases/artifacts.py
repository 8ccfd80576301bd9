"""Artifact use cases: split a checkpoint into an inference artifact, compress one in place.

The transforms (`transforms.split`, `transforms.compress`) write, verify and atomically rename;
they run on the rail (`usecases.rail.acting_on`), as retention's acts do: the checkpoint must be
`ok`, inside a configured root, unchanged since it was indexed; the run's lease is held; an
audit event is recorded before and completed after; the result is registered in the catalog so
the watcher and the indexer know the artifact is ours (never indexed as an unrelated new
checkpoint).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog.store import Acting, Acts, Reads
from ..catalog.store_leases import HeldLease
from ..children.sandbox import UNSANDBOXED
from ..core import families
from ..core.errors import UsageError
from ..core.model import Checkpoint, CheckpointStatus, Format, Kind
from ..core.progress import Counter, OnProgress
from ..fs import fsops, name_limits
from ..logs import event
from ..settings.config import Artifacts, Config
from . import rail
from .copy_room import check_copy

if TYPE_CHECKING:
    from ..transforms.compress import CompressResult
    from ..transforms.export_json_h5 import ExportResult
    from ..transforms.split import SplitResult


def split_checkpoint(
    config: Config,
    store: Acting,
    ref: str,
    *,
    out: Path | None = None,
    keep_compile: bool = False,
    actor: str,
    leased: HeldLease | None = None,
    on_progress: OnProgress | None = None,
) -> tuple[Checkpoint, SplitResult]:
    """`leased`: the run's lease the caller (retention's demotion) holds, renewed meanwhile.
    A demotion frees more than it writes (the full file goes next): only its artifact must fit.
    Any other split is refused (`space_reserve.check_copy`) unless free space stays at least
    the artifact's size plus `min_free` (or the reserve) after it.

    The artifact is registered before it gets its name (a pending row, completed after), so
    a scan racing the split, or one after a crash in between, knows the file is ours; the file
    also carries a marker (`transforms.marker`). Any other file at that name is never
    replaced: only this checkpoint's own artifact, still as registered, is rewritten. Its
    model card (`<stem>.inference` + `.md`, `usecases.describe`) is written beside it, registered
    as part of it. `on_progress` hears the checkpoint start (its bytes the total) and finish
    (`split`)."""
    from .describe import card_path, own_card, write_card

    c = store.reads.get(ref)
    refuse_by_row(c, "split")
    splitter = _splitter(c)
    counter = Counter(on_progress, 1, c.size_bytes)
    counter.start(c.path)
    _refuse(c, "split")
    with rail.acting_on(config, store, c, "split", actor, leased=leased) as (root, _members):
        _check_out(root, out)
        final = splitter.inference_path(Path(c.path), out)
        _fit(c, (final, "its inference artifact"), (card_path(final), "its model card"))
        if leased is None:  # a demotion frees more than it writes
            weights = c.size_bytes - (c.optimizer_bytes or 0)
            check_copy(config, store.usage, final, weights, "the inference artifact", actor=actor)
        replacing = _own_artifact(root, c, final)
        own_card(root, c, card_path(final))  # a foreign file at the card's name: refused first
        pending = replacing is None
        if pending:
            store.acts.add_artifact(
                c.id, kind="inference", path=str(final), size=0, codec=None, digest=None
            )
        try:
            result = splitter.split(
                root,
                Path(c.path),
                out=out,
                keep_compile=keep_compile,
                replacing=replacing,
                source_hash=c.hash,
            )
        except BaseException:
            if pending:
                store.acts.forget_artifact(str(final))
            raise
        store.acts.add_artifact(
            c.id,
            kind="inference",
            path=str(result.path),
            size=result.bytes,
            codec=None,
            digest=result.hash,
        )
        write_card(config, store.reads, store.acts, c, result.path)
    counter.finish(c.path, "split", c.size_bytes, str(result.path))
    return store.reads.get(str(c.id)), result


def export_checkpoint(
    config: Config,
    store: Acting,
    ref: str,
    *,
    out: Path | None = None,
    actor: str,
) -> tuple[Checkpoint, ExportResult]:
    """`ckpt split --layout json+h5`: `<stem>.json` + `<stem>.weights.h5` + the card
    `<stem>.md`, each registered (pending before it gets its name, as a split), verified in a
    child process (architecture + weights predict identically to the checkpoint) before either
    gets its name. Refused with the reason for formats it cannot take (`refusal`)."""
    from ..children import json_h5_probe
    from ..transforms.export_json_h5 import export, export_paths, refusal
    from .describe import JSON_H5, JSON_H5_WEIGHTS, card_path, own_card, write_card

    c = store.reads.get(ref)
    version = str(c.details.get("keras_version") or "")
    why = refusal(c.format, version)
    if why is not None:
        raise UsageError(f"not exported as json+h5: {c.path} is {why}")
    library = "tf_keras" if version.startswith(("1.", "2.")) else "keras"

    def check(config_temp: Path, weights_temp: Path) -> None:
        confined = json_h5_probe.check(
            library, Path(c.path), config_temp, weights_temp, mode=config.load_sandbox
        )
        if confined.startswith(UNSANDBOXED):  # `load_sandbox: warn`: said every time
            event("load_unsandboxed", level=logging.WARNING, path=c.path, detail=confined)

    _refuse(c, "split")
    with rail.acting_on(config, store, c, "split", actor) as (root, _members):
        _check_out(root, out)
        config_path, weights_path = export_paths(Path(c.path), out, c.format)
        _fit(
            c,
            (config_path, "its json+h5 architecture"),
            (weights_path, "its json+h5 weights"),
            (card_path(config_path), "its model card"),
        )
        own_card(root, c, card_path(config_path))
        weights = c.size_bytes - (c.optimizer_bytes or 0)
        check_copy(config, store.usage, weights_path, weights, "the json+h5 export", actor=actor)
        for kind, path in ((JSON_H5, config_path), (JSON_H5_WEIGHTS, weights_path)):
            if fsops.identity(root, path) is not None:
                raise fsops.WouldReplace(
                    f"{path} exists: refused, nothing replaced (move it away, or --out DIR)"
                )
            store.acts.add_artifact(
                c.id, kind=kind, path=str(path), size=0, codec=None, digest=None
            )
        try:
            result = export(root, Path(c.path), out=out, source_hash=c.hash, check=check)
        except BaseException:
            for path in (config_path, weights_path):
                store.acts.forget_artifact(str(path))
            raise
        for kind, path, size, digest in (
            (JSON_H5, config_path, result.config_bytes, result.config_hash),
            (JSON_H5_WEIGHTS, weights_path, result.weights_bytes, result.weights_hash),
        ):
            store.acts.add_artifact(
                c.id, kind=kind, path=str(path), size=size, codec=None, digest=digest
            )
        write_card(config, store.reads, store.acts, c, config_path)
    return store.reads.get(str(c.id)), result


def _splitter(c: Checkpoint) -> Any:
    """The splitter of `c`'s format row (a module with `split` and `inference_path`): a torch
    zip becomes a `.safetensors`, an HF folder an inference folder, a Keras file a Keras file;
    a row without one gets `transforms.split`, which refuses what it cannot split."""
    row = families.row(c.format)
    return families.resolve(row.splitter if row and row.splitter else "transforms.split")


def _own_artifact(root: Path, c: Checkpoint, final: Path) -> fsops.Identity | None:
    """The identity of what is at `final` if it is `c`'s own registered artifact, unchanged;
    None if nothing is there; WouldReplace (exit 2) for anything else."""
    from ..fs.hashing import hash_artifact
    from ..transforms import marker

    found = fsops.identity(root, final)
    if found is None:
        return None
    registered = [a for a in c.details.get("artifacts", []) if a["path"] == str(final)]
    if registered:
        expected = registered[0]["hash"]
        if expected is None:  # a pending row (a split killed after its rename): the marker
            mark = marker.read(final)
            ours = mark is not None and mark.get("parent") == c.path
        else:
            ours = hash_artifact(final) == expected
        if ours and found.same_file(fsops.identity(root, final)):  # what we hashed is there
            return found
    raise fsops.WouldReplace(
        f"{final} exists and is not this checkpoint's artifact: refused, nothing replaced "
        "(move it away, or write elsewhere with --out)"
    )


def compress_checkpoint(
    config: Config,
    store: Acting,
    ref: str,
    *,
    codec: str = "gzip",
    level: int | None = None,
    shuffle: bool = True,
    actor: str,
    on_progress: OnProgress | None = None,
) -> tuple[Checkpoint, CompressResult]:
    """`on_progress` hears the checkpoint start (its bytes the total) and finish
    (`compressed` or `left`)."""
    from ..transforms.compress import compress

    c = store.reads.get(ref)
    refuse_by_row(c, "compress")
    counter = Counter(on_progress, 1, c.size_bytes)
    counter.start(c.path)
    _refuse(c, "compress")
    with rail.acting_on(config, store, c, "compress", actor) as (root, members):
        # The stat the checks above matched (hash included): compress takes the file's identity
        # before reading it and refuses it unread if a save landed since those checks.
        indexed = store.index.identity(c.id)[0]
        # The rewrite is a whole new file beside the old one until the swap: at most its size.
        check_copy(
            config, store.usage, Path(c.path), c.size_bytes, "the compressed copy", actor=actor
        )
        result = compress(
            root, Path(c.path), codec=codec, level=level, shuffle=shuffle, indexed=indexed
        )
        if result.skipped is None:
            stat = fsops.current_stat(root, members)
            # The rewrite kept the mtime and wrote `bytes_after`: anything else is a save that
            # landed just after the swap. Its stat must not be recorded with our hash (the next
            # scan would trust it): the row keeps the old stat and the next scan re-reads.
            if stat.size == result.bytes_after and stat.mtime_ns == indexed.mtime_ns:
                store.acts.record_rewrite(c.id, stat=stat, digest=result.hash, codec=result.codec)
            else:
                event("compress_saw_a_later_save", path=c.path, note="left for the next scan")
        # Recorded so the scheduled job compresses it once; a file that would not shrink is
        # recorded too (`NOT_SMALLER` + the codec tried), so the job does not try again.
        tried = result.codec if result.skipped is None else f"{NOT_SMALLER}{result.codec}"
        store.acts.add_artifact(
            c.id,
            kind="compressed",
            path=c.path,
            size=result.bytes_after,
            codec=tried,
            digest=result.hash,
        )
    outcome = "compressed" if result.skipped is None else "left"
    counter.finish(c.path, outcome, c.size_bytes, result.skipped or "")
    return store.reads.get(str(c.id)), result


NOT_SMALLER = "not smaller: "


def adopt(reads: Reads, acts: Acts, path: Path) -> str | None:
    """If `path` carries our artifact marker: make sure the catalog lists it as an artifact of
    its parent, and say why it is not a checkpoint (the indexer skips it); else None."""
    from ..core.errors import NotFound
    from ..fs.hashing import artifact_bytes, hash_artifact
    from ..transforms import marker

    mark = marker.read(path)
    if mark is None:
        return None
    parent = str(mark["parent"])
    try:
        owner = reads.get(parent)
    except NotFound:
        return f"an artifact ckpt derived from {parent} (not in the catalog)"
    if not any(a["path"] == str(path) for a in owner.details.get("artifacts", [])):
        kind = str(mark.get("kind") or "inference")
        size, digest = artifact_bytes(path), hash_artifact(path)
        acts.add_artifact(owner.id, kind=kind, path=str(path), size=size, codec=None, digest=digest)
    return f"an artifact ckpt derived from {parent}"


_DONE_TO = {"split": "split", "compress": "compressed"}  # what a transform leaves a file


def _refuse(c: Checkpoint, action: str) -> None:
    """Only an `ok` Keras checkpoint is split or compressed: anything else is refused (exit 2)
    with the reason, before the rail takes the lease."""
    if c.status != CheckpointStatus.OK:
        done = _DONE_TO[action]
        back = (
            f" (put it back first: ckpt trash restore {c.id})"
            if c.status.value == "trashed"
            else ""
        )
        raise UsageError(f"{c.path} is {c.status.value}: only ok checkpoints are {done}{back}")
    if c.format in (Format.TF_CHECKPOINT, Format.SAVED_MODEL):
        raise UsageError(
            f"{c.path} is a {c.format}: {action} works on Keras HDF5 and .keras "
            "files (TF formats keep weights and optimizer state apart only in "
            "their object graph)"
        )


def _fit(c: Checkpoint, *named: tuple[Path, str]) -> None:
    """Every file a split or an export would write has a name that fits (255 bytes), else
    NameTooLong (exit 3) before anything is looked at or written: never a shortened name."""
    for path, what in named:
        name_limits.check_fits(path.name, what, c.path)


def _check_out(root: Path, out: Path | None) -> None:
    """An artifact stays in its checkpoint's root: only paths there are ever written."""
    if out is not None and not Path(os.path.abspath(out)).is_relative_to(root):
        raise UsageError(f"--out {out} is not inside the checkpoint's root {root}")


def is_adapter(c: Checkpoint) -> bool:
    return c.kind == Kind.ADAPTER.value


def refuse_by_row(c: Checkpoint, action: str) -> None:
    """A one-line refusal (exit 2) for what a format's row says split or compress cannot do
    (`split_refusal`, `compress_refusal`), and for a PEFT adapter (already the small file that
    inference loads), before anything else is looked at."""
    done = _DONE_TO[action]
    if is_adapter(c):
        raise UsageError(
            f"not {done}: {c.path} is a PEFT adapter: already small (only the adapter's "
            "weights), loaded as it is on its base model; nothing to take out of it"
        )
    row = families.row(c.format)
    why = getattr(row, f"{action}_refusal") if row is not None else None
    if why is not None:
        raise UsageError(f"not {done}: {c.path} is {c.format}: {why}")


def split_by_policy(c: Checkpoint) -> bool:
    """What the schedule (`artifacts.split_after`) and retention's demotions split, optimizer
    state permitting: the formats whose row has a splitter (Keras files, torch zips and
    Lightning files, Hugging Face Trainer folders), never a PEFT adapter (`refuse_by_row`),
    nor one its row's `splits` leaves whole (a legacy Megatron save of several ranks)."""
    row = families.row(c.format)
    splits = row is not None and row.splitter is not None and not is_adapter(c)
    splits = splits and (row is None or row.splits is None or row.splits(c))
    return splits and (c.optimizer_bytes or 0) > 0


def _compressible(c: Checkpoint) -> bool:
    row = families.row(c.format)
    return row is not None and row.compressible


def due(
    reads: Reads, acts: Acts, cfg: Artifacts, now: float
) -> tuple[list[Checkpoint], list[Checkpoint]]:
    """(to split, to compress): `ok` checkpoints old enough and not done yet, oldest first."""
    from ..core.query import ListQuery

    cold = reads.list(ListQuery(status=CheckpointStatus.OK.value, sort="mtime"))
    split_done = acts.ids_with_artifact("inference")
    compressed = acts.ids_with_artifact("compressed")
    to_split = [
        c
        for c in cold
        if cfg.split_after is not None
        and now - c.mtime >= cfg.split_after
        and split_by_policy(c)
        and c.id not in split_done
    ]
    to_compress = [
        c
        for c in cold
        if cfg.compress_after is not None
        and now - c.mtime >= cfg.compress_after
        and _compressible(c)
        and c.id not in compressed
    ]
    return to_split, to_compress
