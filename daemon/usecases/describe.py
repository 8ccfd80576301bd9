"""`ckpt describe`: a model card for a catalogued checkpoint or artifact, and the card
(`<stem>.inference` + `.md`) that every split writes beside its artifact.

Everything comes from the catalog and the file's metadata: the model config it stores (a
`.keras` archive's `config.json`, read with zipfile and json; a legacy `.h5`'s `model_config`,
read by `children.config_child`, since libhdf5 never runs in this process). No weights are
read and TensorFlow is never imported, so a card takes as long for a 300 MB file as for a
30 kB one. The facts are `core.card`'s, their layouts `core.card_layouts`'.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..catalog.store import Acts, Reads
from ..core import card, card_layouts
from ..core.errors import CkptError, NotFound
from ..core.model import Checkpoint, Format
from ..core.views import checkpoint_json
from ..fs import beneath, fsops
from ..settings.config import Config
from . import guards, lineage

CARD_KIND = "card"
JSON_H5 = "json+h5"  # the kind of an export's `<stem>.json`
JSON_H5_WEIGHTS = card.WEIGHTS_KIND  # ... and of its `<stem>.weights.h5`
FORMATS = ("md", "json", "txt")
_MAX_CONFIG_BYTES = 16 << 20


def card_path(artifact: Path) -> Path:
    """The card's name: the artifact's with `.md` for its Keras suffix (`e03.inference.keras`
    → `e03.inference` + `.md`; an export's `e03.json` → `e03` + `.md`; a torch split's
    `e03.inference.safetensors` → `e03.inference` + `.md`; an HF inference folder
    `inference-6/` → `inference-6` + `.md` beside it, never inside: the folder holds only the
    checkpoint's files)."""
    name = artifact.name
    for suffix in (".weights.h5", ".keras", ".hdf5", ".h5", ".json", ".safetensors"):
        if name.endswith(suffix) and name != suffix:
            return artifact.with_name(name[: -len(suffix)] + ".md")
    return artifact.with_name(name + ".md")


def describe(config: Config, reads: Reads, acts: Acts, ref: str) -> card.Facts:
    """The card's facts for `ref`: a checkpoint (id or path) or one of its artifacts' paths."""
    c, artifact = _find(reads, acts, ref)
    return _facts(config, c, artifact, reads)


def render(facts: card.Facts, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(card_layouts.as_json(facts), indent=1) + "\n"
    return card_layouts.text(facts) if fmt == "txt" else card_layouts.markdown(facts)


def write_card(config: Config, reads: Reads, acts: Acts, c: Checkpoint, artifact: Path) -> Path:
    """Write (or rewrite) the card of `c`'s registered `artifact` beside it and register it
    as part of the artifact (kind `card`): a scan never indexes it, and trash and restore
    move it with the artifact. Anything else at the card's name is never replaced."""
    from ..fs.hashing import hash_files

    fresh = reads.get(str(c.id))
    rows = [a for a in fresh.details.get("artifacts", []) if a["path"] == str(artifact)]
    if not rows:
        raise NotFound(f"{artifact} is not an artifact of {c.path}")
    root = guards.configured_root(config, c).path
    target = card_path(artifact)
    replacing = own_card(root, fresh, target)
    text = render(_facts(config, fresh, rows[0], reads), "md").encode()
    if replacing is None:
        acts.add_artifact(c.id, kind=CARD_KIND, path=str(target), size=0, codec=None, digest=None)
    # Its times: the artifact's (for an inference folder, its config.json's: a file's times).
    like = artifact / "config.json" if artifact.is_dir() else artifact
    with fsops.rewrite(root, target, like=like, replacing=replacing) as temp:
        with open(temp, "wb") as out:  # our own temp, named by fsops.rewrite
            out.write(text)
        digest = hash_files([temp])
    acts.add_artifact(
        c.id, kind=CARD_KIND, path=str(target), size=len(text), codec=None, digest=digest
    )
    return target


def own_card(root: Path, c: Checkpoint, target: Path) -> fsops.Identity | None:
    """What is at `target` if it is `c`'s registered card, unchanged (or pending); None if
    nothing is there; fsops.WouldReplace for anything else (checked before a split starts)."""
    from ..fs.hashing import hash_files

    found = fsops.identity(root, target)
    if found is None:
        return None
    rows = [
        a
        for a in c.details.get("artifacts", [])
        if a["path"] == str(target) and a["kind"] == CARD_KIND
    ]
    if rows and (rows[0]["hash"] is None or hash_files([target]) == rows[0]["hash"]):
        return found
    raise fsops.WouldReplace(
        f"{target} exists and is not this checkpoint's card: refused, nothing replaced "
        "(move it away, or write elsewhere with --out)"
    )


def _find(reads: Reads, acts: Acts, ref: str) -> tuple[Checkpoint, dict[str, Any] | None]:
    try:
        return reads.get(ref), None
    except NotFound:
        owner = acts.artifact_owner(os.path.abspath(ref))
        if owner is None:
            raise
    c = reads.get(str(owner))
    artifacts = c.details.get("artifacts", [])
    by_path = {a["path"]: a for a in artifacts}
    found = by_path[os.path.abspath(ref)]
    if found["kind"] == JSON_H5_WEIGHTS:  # the export is described by its config's row
        found = next((a for a in artifacts if a["kind"] == JSON_H5), found)
    if found["kind"] in ("inference", JSON_H5):
        return c, found
    return c, None  # a card, or the checkpoint compressed in place: the checkpoint's card


def _facts(
    config: Config, c: Checkpoint, artifact: dict[str, Any] | None, reads: Reads
) -> card.Facts:
    c = lineage.with_lineage(config, reads, c)
    return card.facts(
        checkpoint_json(c, detailed=True), _model_config(config, c, artifact), artifact
    )


def _model_config(config: Config, c: Checkpoint, artifact: dict[str, Any] | None) -> Any:
    """The model config the file stores, or None where there is none or it is unreadable
    (the card then says less; it never fails for it)."""
    root = config.root_for(Path(c.path))
    base = root.path if root is not None else None
    paths = [Path(artifact["path"])] if artifact else []
    paths.append(Path(c.path))
    for path in paths:
        try:
            data = _CONFIGS.read(path, functools.partial(_config_bytes, c, path, base, artifact))
        except (CkptError, OSError, KeyError):
            continue
        try:
            return json.loads(data) if data else None
        except (ValueError, RecursionError):
            return None
    return None


class _ConfigMemo:
    """The model config bytes last read from each file, while the file is the same (path,
    inode, size, mtime): a legacy `.h5`'s is read by a child process (most of a second), and the
    web view draws a checkpoint's card again at each change of the catalog. A few small ones."""

    ENTRIES, MAX_BYTES = 64, 1 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, int, int, int], bytes | CkptError | None] = OrderedDict()

    def read(self, path: Path, read: Callable[[], bytes | None]) -> bytes | None:
        st = os.stat(path)
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                kept = self._kept[key]
                if isinstance(kept, CkptError):  # the file said no: it still does
                    raise kept
                return kept
        try:
            data = read()
        except CkptError as exc:
            self._keep(key, exc)
            raise
        if data is None or len(data) <= self.MAX_BYTES:
            self._keep(key, data)
        return data

    def _keep(self, key: tuple[str, int, int, int], value: bytes | CkptError | None) -> None:
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self.ENTRIES:
                self._kept.popitem(last=False)


_CONFIGS = _ConfigMemo()


def _config_bytes(
    c: Checkpoint, path: Path, root: Path | None, artifact: dict[str, Any] | None
) -> bytes | None:
    from ..formats import model_config

    if artifact is not None and artifact["kind"] == JSON_H5 and path == Path(artifact["path"]):
        return beneath.read_bounded(path, _MAX_CONFIG_BYTES, root)
    if c.format == Format.KERAS_ZIP:
        return model_config.archive_config(path, root)
    if c.format == Format.KERAS_LEGACY_H5:
        from ..children import config_child

        return config_child.stored_config(path, root)
    return None
