"""`ckpt verify`: do the files still hold the bytes the catalog indexed? Re-hash and compare.

A mismatch is reported, never "fixed". A file whose stat changed is left to the next scan, which
re-indexes it (a new generation). A file whose hash differs while its size, mtime and inode are
the indexed ones (bit rot, a copy cut short under the same mtime) has no new generation for any
scan to find: it is marked `corrupt` in the catalog, with an audit event, so `best`, `latest`
and retention stop treating it as ok; it is worth a human's look.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..catalog.store import Acts, Index, Reads
from ..children.sandbox import UNSANDBOXED
from ..core import families
from ..core.errors import CkptError
from ..core.families import folder_formats
from ..core.model import Checkpoint, CheckpointStatus, Format
from ..core.progress import Counter, OnProgress
from ..core.query import ListQuery
from ..fs import fsops
from ..fs.hashing import hash_artifact, hash_files
from ..logs import event
from ..settings.config import Config
from . import folder_load, folder_units, guards


@dataclass(frozen=True)
class Verdict:
    id: int
    path: str
    ok: bool
    detail: str  # "hash matches", "hash differs", "file missing", ...

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "path": self.path, "ok": self.ok, "detail": self.detail}


def verify(
    config: Config,
    reads: Reads,
    index: Index,
    acts: Acts,
    refs: list[str],
    *,
    load: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    actor: str | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    on_progress: OnProgress | None = None,
) -> list[Verdict]:
    """Verdicts for `refs` (ids or paths), or for every `ok` checkpoint and its artifacts;
    with `load`, also whether Keras loads each one and its inference artifact predicts the
    same (in a child process, one at a time). `should_stop` is asked before each checkpoint.

    A full verify of a large catalog takes minutes (`--load`: seconds per checkpoint), so
    each verdict goes to `on_verdict` as soon as it is known, and `on_progress` hears when a
    checkpoint starts and when it is done (counted in checkpoints and their bytes)."""
    targets = [reads.get(ref) for ref in refs] or [
        c for c in reads.list(ListQuery(status=CheckpointStatus.OK.value))
    ]
    counter = Counter(on_progress, len(targets), sum(c.size_bytes or 0 for c in targets))
    verdicts: list[Verdict] = []
    for c in targets:
        if should_stop():
            break
        counter.start(c.path)
        mine = _verdicts(config, reads, index, acts, c, load, actor, on_verdict)
        failed = [v for v in mine if not v.ok]
        outcome = "failed" if failed else "ok"
        counter.finish(c.path, outcome, c.size_bytes or 0, (failed or mine)[0].detail)
        verdicts += mine
    return verdicts


def _verdicts(
    config: Config,
    reads: Reads,
    index: Index,
    acts: Acts,
    c: Checkpoint,
    load: bool,
    actor: str | None,
    on_verdict: Callable[[Verdict], None] | None,
) -> list[Verdict]:
    """The checkpoint's verdict, its artifacts' and (with `load`) its load's, each handed
    to `on_verdict` as it is known."""
    found = []

    def note(v: Verdict) -> None:
        found.append(v)
        if on_verdict is not None:
            on_verdict(v)

    note(_checkpoint(config, index, acts, c, actor))
    full = reads.get(str(c.id))
    for a in full.details.get("artifacts", []):
        note(_artifact(c, a))
    if load:
        loaded = _load(full, config.load_sandbox)
        if UNSANDBOXED in loaded.detail:  # `load_sandbox: warn`: said every time
            event("load_unsandboxed", level=logging.WARNING, path=c.path, detail=loaded.detail)
        note(loaded)
    return found


def _load(c: Checkpoint, mode: str) -> Verdict:
    """Load it in a child that runs none of the file's code, sandboxed (`children.sandbox`;
    `mode`: `load_sandbox`), by its format row's `load` check."""
    row = families.row(c.format)
    if row is None or row.load is None:
        if c.status != CheckpointStatus.OK and c.format is None:
            return Verdict(c.id, c.path, *folder_load.not_run(c))
        return Verdict(
            c.id,
            c.path,
            True,
            f"load: not checked ({c.format} has no architecture or is not a Keras file)",
        )
    return Verdict(c.id, c.path, *families.resolve(row.load)(c, mode))


def keras_load(c: Checkpoint, mode: str) -> tuple[bool, str]:
    """Load with the Keras that wrote it (tf-keras for Keras 2 files)
    (`children.keras_load_probe`), and its inference artifact beside it."""
    from ..children import keras_load_probe

    library = "tf_keras" if str(c.details.get("keras_version") or "").startswith("2.") else "keras"
    inference = [a["path"] for a in c.details.get("artifacts", []) if a["kind"] == "inference"]
    try:
        result = keras_load_probe.probe(library, [Path(c.path), *map(Path, inference)], mode=mode)
    except (CkptError, OSError) as exc:
        return (False, f"load with {library} not run: {guards.one_line(exc)}")
    if "refused" in result:
        reasons = "; ".join(str(r) for r in result["refused"])
        return (False, f"load refused, nothing of the file run: {reasons}")
    if "error" in result:
        return (False, f"load with {library} failed: {result['error']}")
    user = f" ({result['sandbox']})" if result.get("sandbox") else ""
    if result["identical"] is None:
        return (True, f"loads with {library}{user}")
    same = bool(result["identical"])
    return (
        same,
        f"loads with {library}{user}; inference artifact predicts "
        + ("identically" if same else f"differently (max {result['max_abs_diff']})"),
    )


_HF_WEIGHTS = ("model*.safetensors", "pytorch_model*.bin")


def torch_load(c: Checkpoint, mode: str) -> tuple[bool, str]:
    """Load with torch in a child (`children.torch_load_probe`: `weights_only=True`, or
    safetensors; sandboxed), and compare its inference artifact's
    tensors with the checkpoint's. An HF folder: its weight files."""
    from ..children import torch_load_probe

    if c.status != CheckpointStatus.OK:
        return folder_load.not_run(c)
    paths = [Path(c.path)]
    if c.format == Format.HF_FOLDER:
        paths = sorted({p for pattern in _HF_WEIGHTS for p in Path(c.path).glob(pattern)})
    inference = [a["path"] for a in c.details.get("artifacts", []) if a["kind"] == "inference"]
    if inference and c.format == Format.HF_FOLDER and Path(inference[0]).is_dir():
        return folder_load.hf_inference(c, Path(inference[0]), mode)
    artifact = Path(inference[0]) if inference and Path(inference[0]).is_file() else None
    try:
        result = torch_load_probe.probe(paths, artifact, mode=mode)
    except (CkptError, OSError) as exc:
        return (False, f"load with torch not run: {guards.one_line(exc)}")
    if "refused" in result:
        return (
            False,
            f"load refused by torch (weights_only), nothing run: {result['refused']}",
        )
    if "error" in result:
        return (False, f"load with torch failed: {result['error']}")
    done = f"loads with torch, weights_only ({result['tensors']} tensors, {result['sandbox']})"
    if result["identical"] is None:
        return (True, done)
    same = bool(result["identical"])
    differs = ", ".join(result.get("differs") or [])
    return (
        same,
        f"{done}; inference artifact holds "
        + ("identical tensors" if same else f"different tensors: {differs}"),
    )


BIT_ROT = "bytes changed since indexed (hash differs, same size and mtime)"


def _checkpoint(
    config: Config, index: Index, acts: Acts, c: Checkpoint, actor: str | None
) -> Verdict:
    if c.status != CheckpointStatus.OK or not c.hash:
        return Verdict(c.id, c.path, False, f"not verifiable: {c.status.value}")
    try:
        root, members = guards.located(config, index, c)
        expected, digest, _files = index.identity(c.id)
        before = fsops.current_stat(root, members)
        if c.format == Format.SAVED_MODEL:  # a folder: its files are hashed by name, see hashing
            same = before == expected
            return Verdict(c.id, c.path, same, "stat matches" if same else "stat differs")
        if c.format in folder_formats():  # a folder checkpoint: its recorded files
            members = folder_units.member_files(Path(c.path), _files)
            before = fsops.current_stat(root, members)
        actual = hash_files(members)
        after = fsops.current_stat(root, members)
    except FileNotFoundError:
        return Verdict(c.id, c.path, False, "file missing")
    except (CkptError, OSError) as exc:
        return Verdict(c.id, c.path, False, guards.one_line(exc))
    if actual == digest:
        return Verdict(c.id, c.path, True, "hash matches")
    if before != expected or after != expected:  # a new generation: the scan's to index
        return Verdict(
            c.id,
            c.path,
            False,
            f"hash differs: the file changed since indexed ({guards.stat_diff(expected, after)}): "
            "the next scan re-indexes it",
        )
    _mark_corrupt(acts, c, actor)
    return Verdict(
        c.id, c.path, False, f"{BIT_ROT}: marked corrupt (catalog {digest}, file {actual})"
    )


def _mark_corrupt(acts: Acts, c: Checkpoint, actor: str | None) -> None:
    from ..catalog.audit import actor as process_actor

    with acts.audited(
        action="mark-corrupt",
        checkpoint_id=c.id,
        path=c.path,
        reason=BIT_ROT,
        size=c.size_bytes,
        actor=actor or process_actor(),
    ):
        acts.set_status(c.id, CheckpointStatus.CORRUPT, BIT_ROT)


def _artifact(c: Checkpoint, artifact: dict[str, object]) -> Verdict:
    path = Path(str(artifact["path"]))
    try:
        actual = hash_artifact(path)  # an HF inference folder: every file in it
    except FileNotFoundError:
        return Verdict(c.id, str(path), False, f"{artifact['kind']} artifact missing")
    same = actual == artifact["hash"]
    return Verdict(
        c.id,
        str(path),
        same,
        f"{artifact['kind']} artifact hash {'matches' if same else 'differs'}",
    )
