"""TensorFlow's `checkpoint` state file (a text CheckpointState proto). Pure text in, text out.

    model_checkpoint_path: "ckpt-3"
    all_model_checkpoint_paths: "ckpt-2"
    all_model_checkpoint_paths: "ckpt-3"
    all_model_checkpoint_timestamps: 1795964367.95
    all_model_checkpoint_timestamps: 1795964368.01
    last_preserved_timestamp: 1795964366.86

When we trash a checkpoint, the file must keep naming checkpoints that exist, so that
`tf.train.latest_checkpoint()` and `CheckpointManager` on resume still work.
"""

from __future__ import annotations

import json
import posixpath
import re

STATE_FILE = "checkpoint"
_LINE = re.compile(r"^\s*(\w+)\s*:\s*(.*?)\s*$")


def without(text: str, folder: str, removed: str) -> str | None:
    """`text` with the checkpoint `removed` (a prefix path) forgotten; None if not named."""
    entries = [_LINE.match(line) for line in text.splitlines()]
    pairs = [(m.group(1), m.group(2)) for m in entries if m]
    paths = [_unquote(v) for k, v in pairs if k == "all_model_checkpoint_paths"]
    stamps = [v for k, v in pairs if k == "all_model_checkpoint_timestamps"]
    latest = next((_unquote(v) for k, v in pairs if k == "model_checkpoint_path"), None)

    def same(path: str) -> bool:
        return posixpath.normpath(posixpath.join(folder, path)) == posixpath.normpath(removed)

    if not any(same(p) for p in paths) and not (latest and same(latest)):
        return None
    keep = [i for i, p in enumerate(paths) if not same(p)]
    kept_paths = [paths[i] for i in keep]
    if latest is None or same(latest):
        latest = kept_paths[-1] if kept_paths else None
    lines = [f"model_checkpoint_path: {_quote(latest)}"] if latest else []
    lines += [f"all_model_checkpoint_paths: {_quote(p)}" for p in kept_paths]
    if len(stamps) == len(paths):
        lines += [f"all_model_checkpoint_timestamps: {stamps[i]}" for i in keep]
    lines += [f"{k}: {v}" for k, v in pairs if k not in _REWRITTEN]
    return "\n".join(lines) + "\n"


def listed(text: str, folder: str) -> list[str]:
    """The checkpoints `text` names (latest and all kept), as paths joined to `folder`."""
    pairs = [(m.group(1), m.group(2)) for line in text.splitlines() if (m := _LINE.match(line))]
    names = [_unquote(v) for k, v in pairs if k in _PATH_KEYS]
    return [posixpath.normpath(posixpath.join(folder, n)) for n in dict.fromkeys(names) if n]


_PATH_KEYS = {"model_checkpoint_path", "all_model_checkpoint_paths"}
_REWRITTEN = {
    "model_checkpoint_path",
    "all_model_checkpoint_paths",
    "all_model_checkpoint_timestamps",
}


def _unquote(value: str) -> str:
    try:
        parsed = json.loads(value)
    except ValueError:
        return value.strip('"')
    return parsed if isinstance(parsed, str) else value


def _quote(value: str) -> str:
    return json.dumps(value)
