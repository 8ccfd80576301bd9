"""The text of `ckpt show`: the terse layout of a checkpoint's card facts (`core.card.facts`),
then what only `show` lists (generations, versions, artifacts, audit events). Pure:
`checkpoint_json(..., detailed=True)` documents in, lines out."""

from __future__ import annotations

from typing import Any

from .card import facts
from .health import summary as health_summary
from .text import dash_text, metric_text, packed, relative_path, visible_doc
from .units import format_size


def show_text(doc: dict[str, Any]) -> str:
    """The text of `ckpt show`: the terse layout of `core.card.facts` (the facts `ckpt
    describe` prints), then what only `show` lists (generations, audit events). Its path
    relative to its root, then the root; every string through `visible`, every float as its
    shortest decimal (`0.001`, not float32's 0.0010000000474974513)."""
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
    framework = "".join(f", {k} {what[k]}" for k in ("keras", "backend") if k in what)
    if doc.get("world_size"):  # a sharded save: how many ranks wrote it
        framework += f", world size {doc['world_size']}"
    lines += [
        f"  format {doc['format'] or '-'} ({doc['kind'] or '-'}){framework}",
        f"  model {what['model']}",
        f"  size {sizes['file']}: weights {sizes['weights']}, "
        f"optimizer state {sizes['optimizer state']}",
        f"  parameters {params['total']} ({params['trainable']} trainable)",
        f"  epoch {epoch['epoch']}  step {epoch['step']}  iterations {epoch['iterations']}"
        + (f"  (epoch from {epoch['epoch from']})" if doc.get("epoch_source") else ""),
        f"  optimizer {doc['optimizer'] or '-'}  learning rate {dash_text(doc['learning_rate'])}",
        f"  mtime {lineage['mtime']}  indexed {doc['indexed_at'] or '-'}",
    ]
    if doc["hash"]:
        lines.append(f"  hash {doc['hash']}")
    lines += [f"  {k} {lineage[k]}" for k in ("base model", "base revision") if k in lineage]
    lines += [f"  {k}: {lineage[k]}" for k in ("base path", "base missing") if k in lineage]
    if doc.get("version_of"):
        lines.append(f"  version {doc['generation']} of {doc['version_of']}")
    lines += [f"  metric {name} = {value} ({source})" for name, value, source in f.metrics]
    said = health_summary(doc.get("metrics") or {})
    if said is not None:  # the integrity stage's verdict on its weights
        lines.append(f"  health {said}")
    lines += _generations(doc) + _versions(doc)
    lines += packed("  training config", [f"{k}={v}" for k, v in f.training])
    if isinstance(doc.get("optimizer_config"), dict):
        shown = dash_text(doc["learning_rate"])  # on the `optimizer` line: not said twice
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
            f"    {g.get('generation')}: epoch {dash_text(g.get('epoch'))}  iterations "
            f"{dash_text(g.get('iterations'))}  indexed {g.get('indexed_at') or '-'}"
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
        parts = [f"v{v['generation']}: epoch {dash_text(v['epoch'])}", values, state, where]
        lines.append("    " + "  ".join(p for p in parts if p))
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
