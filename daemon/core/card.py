"""The facts of a model card (`ckpt describe`) and of `ckpt show`: one list, two layouts.

`facts(doc, model_config)` turns a `checkpoint_json(..., detailed=True)` document (plus the
model config the file stores, when the caller read it) into `Facts`: every value already
formatted once (shortest floats, sizes, escaped names). `show` lays them out tersely
(`core.show_text`); `describe` as Markdown, plain text or JSON (`core.card_layouts`). Pure:
documents in, facts out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import families
from .model import Format, Kind
from .resume import optimizer_config_lost, resumability
from .text import config_text, dash_text, relative_path, visible_doc
from .units import format_size

# The codecs whose HDF5 filters Keras cannot read without `import hdf5plugin` (keras-formats §0.7).
PLUGIN_CODECS = ("zstd", "blosc", "blosc2", "bitshuffle", "lz4")
WEIGHTS_KIND = "json+h5-weights"  # the artifact row of an export's `<stem>.weights.h5`


def export_weights_suffix(fmt: Format | None) -> str:
    """The weights file of a json+h5 export: the Keras 3 store layout for archives, the legacy
    `save_weights("x.h5")` layout for legacy full-model `.h5` files (a name ending
    `.weights.h5` would make `load_weights` read it as a Keras 3 store)."""
    return ".legacy-weights.h5" if fmt is Format.KERAS_LEGACY_H5 else ".weights.h5"


@dataclass(frozen=True)
class LayerRow:
    name: str
    class_name: str
    n_params: int
    shapes: str  # "8x16, 16"
    trainable: str  # "yes" | "no" | "-"


@dataclass(frozen=True)
class Port:
    """A model input or output: its layer, shape (`(None, 8)`) and dtype, as the config says."""

    name: str
    shape: str
    dtype: str


@dataclass(frozen=True)
class Facts:
    title: str  # the file's path relative to its root
    what: list[tuple[str, str]]
    inputs: list[Port]
    outputs: list[Port]
    parameters: list[tuple[str, str]]
    layers: list[LayerRow]
    optimizer: list[tuple[str, str]]
    training: list[tuple[str, str]]
    epoch: list[tuple[str, str]]
    metrics: list[tuple[str, str, str]]  # name, value, source
    sizes: list[tuple[str, str]]
    lineage: list[tuple[str, str]]
    load: str
    notes: list[str] = field(default_factory=list)


def facts(
    doc: dict[str, Any], model_config: Any = None, artifact: dict[str, Any] | None = None
) -> Facts:
    """The card of checkpoint `doc`, or of its `artifact` (a row of `doc["artifacts"]`)."""
    doc = visible_doc(doc)
    model_config = visible_doc(model_config)
    path = artifact["path"] if artifact else doc["path"]
    fmt = _format(doc["format"])
    inference = artifact is not None
    resume = resumability(
        fmt,
        doc["kind"],
        doc["optimizer_bytes"],
        doc["keras_version"],
        optimizer_config_lost=optimizer_config_lost(fmt, doc),
    )
    n, trainable = doc["n_params"], doc["n_trainable_params"]
    optimizer_bytes = 0 if inference else doc["optimizer_bytes"]
    inputs, outputs = ports(model_config)
    # Keras and TensorFlow files say their Keras version and backend ("-" when unknown); any
    # other format's only when it records one
    keras_family = (row := families.row(fmt)) is not None and row.writer == "keras"
    what = [
        ("format", _format_text(doc, artifact)),
        *[
            (name, doc[key] or "-")
            for name, key in (("keras", "keras_version"), ("backend", "backend"))
            if keras_family or doc[key]
        ],
        ("model", f"{doc['model_class'] or '-'} {doc['model_name'] or ''}".rstrip()),
        # a sharded save (FSDP/verl rank files, DCP, Megatron): the ranks that wrote it
        *([("world size", str(doc["world_size"]))] if doc.get("world_size") else []),
        (
            "resumable",
            "no - an inference artifact: no optimizer state"
            if inference
            else f"{'yes' if resume.resumable else 'no'} - {resume.reason}",
        ),
    ]
    parameters = [
        ("total", _count(n)),
        ("trainable", _count(trainable)),
        ("non-trainable", _count(None if n is None or trainable is None else n - trainable)),
    ]
    epoch = [
        ("epoch", dash_text(doc["epoch"])),
        ("step", dash_text(doc["step"])),
        ("iterations", dash_text(doc["iterations"])),
        ("epoch from", doc.get("epoch_source") or "-"),
    ]
    sources = doc.get("metric_sources") or {}
    metrics = [
        (name, "null" if value is None else config_text(value), sources.get(name, "?"))
        for name, value in sorted(doc["metrics"].items())
    ]
    size = artifact["bytes"] if artifact else doc["size_bytes"]
    if artifact and artifact["kind"] == "json+h5":  # the config and its weights file
        size += sum(a["bytes"] for a in doc.get("artifacts") or [] if a["kind"] == WEIGHTS_KIND)
    sizes = [
        ("file", format_size(size)),
        ("weights", format_size(doc["weights_bytes"])),
        ("optimizer state", format_size(optimizer_bytes)),
    ]
    return Facts(
        title=relative_path(path, [doc["root"]]),
        what=what,
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
        layers=_layers(doc, model_config),
        optimizer=[] if inference else _optimizer(doc),
        training=[] if inference else _training(doc),
        epoch=epoch,
        metrics=metrics,
        sizes=sizes,
        lineage=_lineage(doc, artifact),
        load=_adapter_load(doc)
        if doc["kind"] == Kind.ADAPTER.value and not inference
        else load_line(
            path, fmt, doc["keras_version"], artifact, doc.get("codec"), doc.get("model_class")
        ),
        # The checkpoint's resume note is not the artifact's (its own line says why not).
        notes=[n for n in doc.get("notes") or [] if not (inference and n.startswith("resume"))],
    )


def _format(value: str | None) -> Format | None:
    try:
        return Format(value) if value else None
    except ValueError:
        return None


def _format_text(doc: dict[str, Any], artifact: dict[str, Any] | None) -> str:
    if artifact is not None and artifact["kind"] == "json+h5":
        weights = export_weights_suffix(_format(doc["format"]))
        return f"json+h5 (model config JSON + {weights}, exported from {doc['format']})"
    if artifact is not None and _torch_split(artifact):
        return (
            f"safetensors (inference artifact: the model's state dict, split from {doc['format']})"
        )
    if artifact is not None and doc["format"] == Format.HF_FOLDER.value:
        return (
            "hf-folder (inference folder: config, weights and tokenizer files copied byte for "
            "byte; no optimizer, scheduler, RNG or trainer state)"
        )
    if artifact is not None:
        return f"{doc['format']} (inference artifact: architecture + weights)"
    kind = doc["kind"]
    shown = {Kind.FULL.value: "full model", "weights": "weights only"}.get(kind or "", kind or "-")
    if kind == Kind.ADAPTER.value:
        a = (doc.get("training_config") or {}).get("adapter") or {}
        shown = f"PEFT {a.get('peft_type') or '?'} adapter r={dash_text(a.get('r'))}"
        shown += f" alpha={dash_text(a.get('lora_alpha'))}: loaded on its base model"
    if kind == Kind.WEIGHTS.value and doc.get("optimizer_bytes"):
        # A torch file, a DCP or Orbax folder with optimizer state: no architecture, but far
        # from "weights only" (it resumes).
        shown = "weights + optimizer state, no architecture"
    return f"{doc['format'] or '-'} ({shown})"


def ports(model_config: Any) -> tuple[list[Port], list[Port]]:
    """Inputs (InputLayer shapes and dtypes) and outputs (their layers; a shape where the
    layer's config gives it: Dense units) of a Functional/Sequential model config."""
    config = model_config.get("config") if isinstance(model_config, dict) else None
    if not isinstance(config, dict):
        return [], []
    layers = [x for x in config.get("layers") or [] if isinstance(x, dict)]
    by_name = {_layer_name(x): x for x in layers}
    in_names = _port_names(config.get("input_layers"))
    out_names = _port_names(config.get("output_layers"))
    if not in_names:  # Sequential: its first layer, if it is an InputLayer
        in_names = [_layer_name(x) for x in layers[:1] if x.get("class_name") == "InputLayer"]
    if not out_names and layers:
        out_names = [_layer_name(layers[-1])]
    inputs = [_port(name, by_name.get(name)) for name in in_names]
    return inputs, [_port(name, by_name.get(name)) for name in out_names]


def _layer_name(layer: dict[str, Any]) -> str:
    inner = layer.get("config")
    name = inner.get("name") if isinstance(inner, dict) else None
    return str(name if name is not None else layer.get("name", "?"))


def _port_names(spec: Any) -> list[str]:
    """`[["x", 0, 0]]`, `["x", 0, 0]` or a dict of them (Keras 3 dict inputs)."""
    if isinstance(spec, dict):
        spec = list(spec.values())
    if isinstance(spec, list) and spec and isinstance(spec[0], str):
        return [spec[0]]
    if isinstance(spec, list):
        return [name for item in spec for name in _port_names(item)]
    return []


def _port(name: str, layer: dict[str, Any] | None) -> Port:
    inner = layer.get("config") if layer else None
    inner = inner if isinstance(inner, dict) else {}
    shape = inner.get("batch_shape") or inner.get("batch_input_shape")
    if shape is None and isinstance(inner.get("units"), int):
        shape = [None, inner["units"]]
    dtype = inner.get("dtype")
    if isinstance(dtype, dict):  # Keras 3 DTypePolicy
        dtype = (dtype.get("config") or {}).get("name")
    shown = "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")" if shape else "-"
    return Port(name, shown.replace(",)", ")") if shape else shown, str(dtype or "-"))


def _layers(doc: dict[str, Any], model_config: Any) -> list[LayerRow]:
    flags = {}
    config = model_config.get("config") if isinstance(model_config, dict) else None
    for layer in (config or {}).get("layers") or [] if isinstance(config, dict) else []:
        if isinstance(layer, dict) and isinstance(layer.get("config"), dict):
            flags[_layer_name(layer)] = layer["config"].get("trainable", True) is not False
    rows = []
    for layer in doc.get("layers") or []:
        shapes = ", ".join("x".join(map(str, w["shape"])) or "scalar" for w in layer["weights"])
        flag = flags.get(layer["name"])
        rows.append(
            LayerRow(
                layer["name"],
                layer["class_name"] or "",
                layer["n_params"],
                shapes,
                "-" if flag is None else ("yes" if flag else "no"),
            )
        )
    return rows


def _optimizer(doc: dict[str, Any]) -> list[tuple[str, str]]:
    if not doc["optimizer"] and not doc.get("optimizer_config"):
        return []
    pairs = [("class", doc["optimizer"] or "-"), ("learning rate", dash_text(doc["learning_rate"]))]
    config = doc.get("optimizer_config")
    if isinstance(config, dict):
        pairs += [(k, config_text(v)) for k, v in config.items() if v is not None]
    return pairs


def _training(doc: dict[str, Any]) -> list[tuple[str, str]]:
    training = doc.get("training_config")
    if not isinstance(training, dict):
        return []
    named = ("loss", "metrics", "weighted_metrics", "loss_weights")
    keys = [k for k in named if k in training] + [k for k in training if k not in named]
    return [(k, config_text(training[k])) for k in keys if training[k] is not None]


def _base_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """An adapter's base model (`usecases.lineage`): its name, revision, and where it is here,
    or why it is missing."""
    base = doc.get("base_model")
    if not isinstance(base, dict):
        return []
    rows = [
        ("base model", base.get("name") or "-"),
        ("base revision", dash_text(base.get("revision"))),
    ]
    if base.get("missing"):
        return [*rows, ("base missing", base["missing"])]
    if base.get("path"):
        where = "" if base.get("in_root") else " (outside every root)"
        shown = relative_path(base["path"], [doc["root"]])
        ident = f" (checkpoint {base['checkpoint_id']})" if base.get("checkpoint_id") else ""
        return [*rows, ("base path", f"{shown}{ident}{where}")]
    return [*rows, ("base path", "- (not saved in any root: from the hub by name)")]


def _adapter_load(doc: dict[str, Any]) -> str:
    base = doc.get("base_model") or {}
    named = repr(base.get("path") or base.get("name") or "BASE_MODEL")
    return (
        f"import peft, transformers; base = transformers.AutoModel.from_pretrained({named}); "
        f"model = peft.PeftModel.from_pretrained(base, {doc['path']!r})"
    )


def _lineage(doc: dict[str, Any], artifact: dict[str, Any] | None) -> list[tuple[str, str]]:
    pairs = [("run", doc["run"]), ("root", doc["root"]), *_base_rows(doc)]
    if artifact:
        pairs += [
            ("derived from", relative_path(doc["path"], [doc["root"]])),
            ("source hash", doc["hash"] or "-"),
            ("artifact hash", artifact.get("hash") or "-"),
            ("written", artifact.get("created_at") or "-"),
        ]
    else:
        pairs.append(("hash", doc["hash"] or "-"))
    pairs += [
        ("mtime", doc["mtime"]),
        ("indexed", f"{doc['indexed_at'] or '-'}" + _indexed_by(doc)),
    ]
    if doc.get("codec"):
        pairs.append(("compressed", doc["codec"]))
    for a in doc.get("artifacts") or []:
        if artifact is None or (a["path"] != artifact["path"] and a["kind"] != "card"):
            shown = relative_path(a["path"], [doc["root"]])
            pairs.append((f"artifact {a['kind']}", f"{shown} ({a.get('hash') or 'pending'})"))
    return pairs


def _indexed_by(doc: dict[str, Any]) -> str:
    for e in doc.get("events") or []:
        if e.get("action") == "indexed":
            return f" by {e['actor']}"
    return ""


def load_line(
    path: str,
    fmt: Format | None,
    keras_version: str | None,
    artifact: dict[str, Any] | None = None,
    codec: str | None = None,
    model_class: str | None = None,
) -> str:
    """The one line of Python that loads this file (with `import hdf5plugin` first when its
    codec needs it); an HF folder by its `model_class` (config.json's architecture) when that
    is a plain class name, else by `AutoModel`."""
    lib = "tf_keras" if (keras_version or "").startswith(("1.", "2.")) else "keras"
    quoted = json.dumps(path)
    if artifact is not None and artifact.get("kind") == "json+h5":
        weights = json.dumps(path[: -len(".json")] + export_weights_suffix(fmt))
        line = (
            f"import {lib}; model = {lib}.models.model_from_json(open({quoted}).read()); "
            f"model.load_weights({weights})"
        )
    elif artifact is not None and _torch_split(artifact):
        line = (
            f"from safetensors.torch import load_file; model.load_state_dict(load_file({quoted}))"
            "  # model: built with the same architecture"
        )
    else:  # the format row's line (an HF folder: by its class, config.json's architecture)
        row = families.row(fmt)
        if row is None or row.load_line is None:
            return "-"
        named = model_class if (model_class or "").isidentifier() else "AutoModel"
        line = row.load_line.format(path=quoted, lib=lib, model=named)
    needs_plugin = any(c in (codec or "") for c in PLUGIN_CODECS)
    return f"import hdf5plugin; {line}" if needs_plugin else line


def _torch_split(artifact: dict[str, Any]) -> bool:
    """An inference `.safetensors` a torch `.pt`/`.ckpt` was split into."""
    return artifact.get("kind") == "inference" and str(artifact.get("path", "")).endswith(
        ".safetensors"
    )


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
