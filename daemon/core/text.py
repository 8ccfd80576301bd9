"""Text as a person reads it, the same in every layer: `visible`, the one escaping of every name
we print or log; paths relative to their root; metric and config values; lines packed to a
width. Pure: strings in, strings out."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .units import shortest_float

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


def dash_text(value: Any) -> str:
    """A value as a card or `show` line prints it: `-` for none, a float as its shortest
    decimal."""
    if isinstance(value, float):
        return shortest_float(value)
    return "-" if value is None else str(value)


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
