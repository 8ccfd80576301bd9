"""Human-readable text for `ckpt show`. Pure: a `checkpoint_json(..., detailed=True)` document in,
lines out."""

from __future__ import annotations

import json
from typing import Any

from daemon.units import format_size


def show_text(doc: dict[str, Any]) -> str:
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
        f"  metric {name} = {value} ({sources.get(name, '?')})"
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
