"""Human-readable text: `visible`, the one escaping of every name we print or log, and `ckpt
show`'s text. Pure: strings and `checkpoint_json(..., detailed=True)` documents in, lines out."""

from __future__ import annotations

import json
import re
from typing import Any

from .units import format_size

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


def metric_text(value: float | None) -> str:
    """A metric as text: JSON's `null` for a value that is not a finite number (see views)."""
    return "null" if value is None else f"{value:.4g}"


def show_text(doc: dict[str, Any]) -> str:
    """The text of `ckpt show`; every string of `doc` is shown through `visible`."""
    doc = visible_doc(doc)
    lines = [f"{doc['path']}", f"  id {doc['id']}  run {doc['run']}  status {doc['status']}"]
    if doc.get("reason"):
        lines.append(f"  reason: {doc['reason']}")
    lines += [
        f"  format {doc['format'] or '-'} ({doc['kind'] or '-'}), "
        f"keras {doc['keras_version'] or '-'}, backend {doc['backend'] or '-'}",
        f"  model {doc['model_class'] or '-'} {doc['model_name'] or ''}".rstrip(),
        f"  size {format_size(doc['size_bytes'])}: weights {format_size(doc['weights_bytes'])}, "
        f"optimizer state {format_size(doc['optimizer_bytes'])}",
        f"  parameters {_count(doc['n_params'])} ({_count(doc['n_trainable_params'])} trainable)",
        f"  epoch {_dash(doc['epoch'])}  step {_dash(doc['step'])}  iterations "
        f"{_dash(doc['iterations'])}",
        f"  optimizer {doc['optimizer'] or '-'}  learning rate {_dash(doc['learning_rate'])}",
        f"  mtime {doc['mtime']}  indexed {doc['indexed_at'] or '-'}  {doc['hash'] or ''}".rstrip(),
    ]
    lines += _metrics(doc) + _notes(doc) + _layers(doc) + _artifacts(doc) + _events(doc)
    return "\n".join(lines)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _metrics(doc: dict[str, Any]) -> list[str]:
    sources = doc.get("metric_sources") or {}
    return [
        f"  metric {name} = {'null' if value is None else value} ({sources.get(name, '?')})"
        for name, value in sorted(doc["metrics"].items())
    ]


def _notes(doc: dict[str, Any]) -> list[str]:
    lines = [f"  note: {note}" for note in doc.get("notes") or []]
    config = doc.get("optimizer_config")
    if config:
        lines.append(f"  optimizer config: {json.dumps(config, sort_keys=True)}")
    if doc.get("signatures"):
        lines.append(f"  signatures: {', '.join(doc['signatures'])}")
    return lines


def _layers(doc: dict[str, Any]) -> list[str]:
    layers = doc.get("layers") or []
    if not layers:
        return []
    lines = [f"  layers ({len(layers)}):"]
    for layer in layers:
        shapes = ", ".join("x".join(map(str, w["shape"])) or "scalar" for w in layer["weights"])
        lines.append(
            f"    {layer['name']:<28} {layer['class_name'] or '':<22} "
            f"{layer['n_params']:>12,}  {shapes}"
        )
    return lines


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
