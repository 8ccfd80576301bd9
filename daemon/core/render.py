"""Human-readable text: `visible`, the one escaping of every name we print or log, paths
relative to their root, and `ckpt show`'s text. Pure: strings and `checkpoint_json(...,
detailed=True)` documents in, lines out."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .units import format_size, shortest_float

# What must not reach a terminal or a log raw: C0 controls (ESC starts colour, cursor and title
# sequences; CR overwrites a line; a newline forges one), DEL, C1 controls (0x9b is a one-byte
# CSI), the bidirectional overrides that make a name read differently from its bytes, the line
# and paragraph separators, and the lone surrogates Python uses for bytes that are not UTF-8.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\udc80-\udcff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: object) -> str:
    """`text` safe to print: each unsafe character becomes its Python escape (ESC → `\\x1b`,
    CR → `\\r`, an undecodable byte → `\\xff`), so a name shows what it holds and cannot
    drive the terminal. Markup (`[red]`) is plain text here: renderers must not interpret it."""
    return _UNSAFE.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible_doc(value: Any) -> Any:
    """A JSON-like document with every string (keys too) passed through `visible`."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_doc(k): visible_doc(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [visible_doc(v) for v in value]
    return value


def relative_path(path: str, roots: Sequence[str]) -> str:
    """`path` relative to the first of `roots` it is inside (`.` for the root itself), or as
    it is when it is inside none: the one rule for paths in tables."""
    for root in roots:
        base = root.rstrip("/") or "/"
        if path == base:
            return "."
        prefix = base if base.endswith("/") else base + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def metric_text(value: float | None) -> str:
    """A metric as text: JSON's `null` for a value that is not a finite number (see views)."""
    return "null" if value is None else f"{value:.4g}"


def show_text(doc: dict[str, Any]) -> str:
    """The text of `ckpt show`: the terse layout of `core.card.facts` (the facts `ckpt
    describe` prints), then what only `show` lists (generations, audit events). Its path
    relative to its root, then the root; every string through `visible`, every float as its
    shortest decimal (`0.001`, not float32's 0.0010000000474974513)."""
    from .card import facts

    f = facts(doc)
    doc = visible_doc(doc)
    what, sizes, epoch = dict(f.what), dict(f.sizes), dict(f.epoch)
    params, lineage = dict(f.parameters), dict(f.lineage)
    lines = [
        f.title,
        f"  root {doc['root']}",
        f"  id {doc['id']}  run {doc['run']}  status {doc['status']}",
    ]
    if doc.get("reason"):
        lines.append(f"  reason: {doc['reason']}")
    lines += [
        f"  format {doc['format'] or '-'} ({doc['kind'] or '-'}), "
        f"keras {what['keras']}, backend {what['backend']}",
        f"  model {what['model']}",
        f"  size {sizes['file']}: weights {sizes['weights']}, "
        f"optimizer state {sizes['optimizer state']}",
        f"  parameters {params['total']} ({params['trainable']} trainable)",
        f"  epoch {epoch['epoch']}  step {epoch['step']}  iterations {epoch['iterations']}"
        + (f"  (epoch from {epoch['epoch from']})" if doc.get("epoch_source") else ""),
        f"  optimizer {doc['optimizer'] or '-'}  learning rate {_dash(doc['learning_rate'])}",
        f"  mtime {lineage['mtime']}  indexed {doc['indexed_at'] or '-'}",
    ]
    if doc["hash"]:
        lines.append(f"  hash {doc['hash']}")
    if doc.get("version_of"):
        lines.append(f"  version {doc['generation']} of {doc['version_of']}")
    lines += [f"  metric {name} = {value} ({source})" for name, value, source in f.metrics]
    lines += _generations(doc) + _versions(doc)
    lines += packed("  training config", [f"{k}={v}" for k, v in f.training])
    if isinstance(doc.get("optimizer_config"), dict):
        shown = _dash(doc["learning_rate"])  # on the `optimizer` line: not said twice
        pairs = [
            f"{k}={v}"
            for k, v in f.optimizer[2:]  # after class and learning rate
            if not (k == "learning_rate" and v == shown)
        ]
        lines += packed(f"  optimizer config ({doc['optimizer'] or '-'})", pairs)
    lines += [f"  note: {note}" for note in f.notes]
    if doc.get("signatures"):
        lines.append(f"  signatures: {', '.join(doc['signatures'])}")
    if f.layers:
        lines.append(f"  layers ({len(f.layers)}):")
        lines += [
            f"    {r.name:<28} {r.class_name:<22} {r.n_params:>12,}  {r.shapes}" for r in f.layers
        ]
    lines += _artifacts(doc) + _events(doc)
    return "\n".join(line.rstrip() for line in lines)


def _generations(doc: dict[str, Any]) -> list[str]:
    """The earlier generations of a file rewritten in place (`best.keras`), oldest first."""
    seen = doc.get("generations") or []
    if len(seen) < 2:
        return []
    lines = [f"  generations seen: {len(seen)}"]
    for g in seen:
        lines.append(
            f"    {g.get('generation')}: epoch {_dash(g.get('epoch'))}  iterations "
            f"{_dash(g.get('iterations'))}  indexed {g.get('indexed_at') or '-'}"
        )
    return lines


def _versions(doc: dict[str, Any]) -> list[str]:
    """The kept copies of a rewritten file's generations (`ckpt restore --version N`)."""
    kept = doc.get("versions") or []
    if not kept:
        return []
    lines = [f"  versions kept: {len(kept)}"]
    for v in kept:
        values = "  ".join(f"{k} {metric_text(x)}" for k, x in sorted(v["metrics"].items()))
        state = "current (the file holds it)" if v["current"] else v["status"]
        where = relative_path(v["path"], [doc["root"]])
        parts = [f"v{v['generation']}: epoch {_dash(v['epoch'])}", values, state, where]
        lines.append("    " + "  ".join(p for p in parts if p))
    return lines


def config_text(value: Any) -> str:
    """A config value as a person reads it: floats shortest (`0.001`), JSON's words
    (`true`, `null`), a Keras object `{class_name, config}` as its class name."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return shortest_float(value)
    if isinstance(value, dict):
        if "class_name" in value and isinstance(value.get("config"), dict):
            name = value["config"].get("name")
            shown = str(value["class_name"])
            return f"{name} ({shown})" if isinstance(name, str) and name else shown
        return "{" + ", ".join(f"{k}: {config_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(config_text(v) for v in value) + "]"
    return str(value)


def packed(label: str, pairs: list[str], width: int = 96) -> list[str]:
    """`label a=1 b=2 ...` over as many lines as it takes to stay within `width` columns."""
    lines: list[str] = []
    current = label
    for pair in pairs:
        if current != label and len(current) + 1 + len(pair) > width:
            lines.append(current)
            current = " " * len(label)
        current += " " + pair
    if current != label:
        lines.append(current)
    return lines


def _dash(value: Any) -> str:
    if isinstance(value, float):
        return shortest_float(value)
    return "-" if value is None else str(value)


def _artifacts(doc: dict[str, Any]) -> list[str]:
    return [
        f"  artifact {a['kind']}: {a['path']} ({format_size(a['bytes'])})"
        for a in doc.get("artifacts") or []
    ]


def _events(doc: dict[str, Any]) -> list[str]:
    return [
        f"  {e['at']} {e['action']} {e['state']} by {e['actor']}"
        + (f": {e['reason']}" if e["reason"] else "")
        for e in doc.get("events") or []
    ]
