"""`ckpt verify`: do the files still hold the bytes the catalog indexed? Re-hash and compare.

A mismatch is reported, never "fixed": the next scan re-indexes a file that changed, and a
checkpoint whose bytes changed without its size or mtime changing is worth a human's look.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon import fsops, guards
from daemon.config import Config
from daemon.errors import CkptError
from daemon.hashing import hash_files
from daemon.model import Checkpoint, CheckpointStatus
from daemon.query import ListQuery
from daemon.store import Store


@dataclass(frozen=True)
class Verdict:
    id: int
    path: str
    ok: bool
    detail: str  # "hash matches", "hash differs", "file missing", ...

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "path": self.path, "ok": self.ok, "detail": self.detail}


def verify(config: Config, store: Store, refs: list[str]) -> list[Verdict]:
    """Verdicts for `refs` (ids or paths), or for every `ok` checkpoint and its artifacts."""
    targets = [store.get(ref) for ref in refs] or [
        c for c in store.list(ListQuery(status=CheckpointStatus.OK.value))
    ]
    verdicts = []
    for c in targets:
        verdicts.append(_checkpoint(config, store, c))
        verdicts += [_artifact(c, a) for a in store.get(str(c.id)).details.get("artifacts", [])]
    return verdicts


def _checkpoint(config: Config, store: Store, c: Checkpoint) -> Verdict:
    if c.status != CheckpointStatus.OK or not c.hash:
        return Verdict(c.id, c.path, False, f"not verifiable: {c.status.value}")
    try:
        root, members = guards.located(config, store, c)
        expected, digest, _files = store.identity(c.id)
        if c.format == "savedmodel":  # a folder: its files are hashed by name, see hashing
            found = fsops.current_stat(root, members)
            same = found == expected
            return Verdict(c.id, c.path, same, "stat matches" if same else "stat differs")
        actual = hash_files(members)
    except FileNotFoundError:
        return Verdict(c.id, c.path, False, "file missing")
    except (CkptError, OSError) as exc:
        return Verdict(c.id, c.path, False, guards.one_line(exc))
    if actual != digest:
        return Verdict(c.id, c.path, False, f"hash differs: catalog {digest}, file {actual}")
    return Verdict(c.id, c.path, True, "hash matches")


def _artifact(c: Checkpoint, artifact: dict[str, object]) -> Verdict:
    path = Path(str(artifact["path"]))
    try:
        actual = hash_files([path])
    except FileNotFoundError:
        return Verdict(c.id, str(path), False, f"{artifact['kind']} artifact missing")
    same = actual == artifact["hash"]
    return Verdict(
        c.id,
        str(path),
        same,
        f"{artifact['kind']} artifact hash {'matches' if same else 'differs'}",
    )
