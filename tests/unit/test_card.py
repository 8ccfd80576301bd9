"""The card's facts (core.card) and layouts (core.card_layouts), and `ckpt show` laid out
from the same facts."""

from __future__ import annotations

import json
from typing import Any

from ckpt_daemon.core import card, card_layouts
from ckpt_daemon.core.model import Format
from ckpt_daemon.core.show_text import show_text

LR32 = 0.0010000000474974513  # 0.001 as float32, as Keras stores it


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": 7,
        "path": "/data/runs/exp|1/e03.keras",
        "run": "exp|1",
        "root": "/data/runs",
        "status": "ok",
        "reason": None,
        "format": "keras-v3-zip",
        "kind": "full",
        "keras_version": "3.15.1",
        "backend": None,
        "model_class": "Functional",
        "model_name": "net\x1b[31m",
        "size_bytes": 3_520_412,
        "weights_bytes": 1_159_336,
        "optimizer_bytes": 2_318_428,
        "n_params": 289_834,
        "n_trainable_params": 289_802,
        "epoch": 3,
        "step": None,
        "iterations": 24,
        "epoch_source": "file name",
        "optimizer": "Adam",
        "learning_rate": LR32,
        "optimizer_config": {"learning_rate": LR32, "beta_1": 0.9, "clipnorm": None},
        "training_config": {"loss": "mse", "metrics": ["mae"], "run_eagerly": False},
        "mtime": "2026-11-29T14:59:27.000Z",
        "indexed_at": "2026-11-29T15:00:00.000Z",
        "hash": "blake3:ab",
        "metrics": {"val_loss": 0.25, "loss": None},
        "metric_sources": {"val_loss": "csv:training.log"},
        "layers": [
            {"name": "x", "class_name": "InputLayer", "n_params": 0, "weights": []},
            {
                "name": "fc|1",
                "class_name": "Dense",
                "n_params": 144,
                "weights": [
                    {"name": "vars/0", "shape": [8, 16], "dtype": "float32"},
                    {"name": "vars/1", "shape": [16], "dtype": "float32"},
                ],
            },
        ],
        "notes": ["resume: yes"],
        "signatures": [],
        "codec": None,
        "artifacts": [],
        "events": [
            {"at": "t", "action": "indexed", "state": "done", "reason": None, "actor": "me"}
        ],
    }
    doc.update(changes)
    return doc


CONFIG = {
    "class_name": "Functional",
    "config": {
        "layers": [
            {"class_name": "InputLayer", "config": {"name": "x", "batch_shape": [None, 8]}},
            {"class_name": "Dense", "config": {"name": "fc|1", "units": 16, "trainable": False}},
        ],
        "input_layers": [["x", 0, 0]],
        "output_layers": [["fc|1", 0, 0]],
    },
}


def test_facts_counts_shapes_and_numbers_without_float32_noise() -> None:
    f = card.facts(_doc(), CONFIG)
    assert dict(f.parameters) == {"total": "289,834", "trainable": "289,802", "non-trainable": "32"}
    assert dict(f.optimizer)["learning rate"] == "0.001"
    assert dict(f.optimizer)["learning_rate"] == "0.001" and "clipnorm" not in dict(f.optimizer)
    assert f.inputs == [card.Port("x", "(None, 8)", "-")]
    assert f.outputs == [card.Port("fc|1", "(None, 16)", "-")]
    assert [(r.name, r.trainable, r.shapes) for r in f.layers] == [
        ("x", "yes", ""),
        ("fc|1", "no", "8x16, 16"),
    ]
    assert dict(f.what)["resumable"].startswith("yes")
    assert f.metrics == [("loss", "null", "?"), ("val_loss", "0.25", "csv:training.log")]
    assert f.load == 'import keras; model = keras.models.load_model("/data/runs/exp|1/e03.keras")'


def test_markdown_escapes_names_and_cannot_break_its_tables() -> None:
    md = card_layouts.markdown(card.facts(_doc(), CONFIG))
    assert "\x1b" not in md and "net\\\\x1b\\[31m" in md  # ESC shown, markup escaped
    assert "| `fc\\|1` | `Dense` | 144 | 8x16, 16 | no |" in md
    for line in md.splitlines():
        if line.startswith("|"):  # every row of a table has the columns of its header
            assert line.replace("\\|", "").count("|") in (3, 4, 5, 6)
    assert md.startswith("# Model card: exp\\|1/e03.keras\n")


def test_json_and_text_hold_the_same_facts() -> None:
    f = card.facts(_doc(), CONFIG)
    doc = json.loads(json.dumps(card_layouts.as_json(f)))
    assert doc["parameters"]["non-trainable"] == "32"
    assert doc["metrics"][1] == {"name": "val_loss", "value": "0.25", "source": "csv:training.log"}
    text = card_layouts.text(f)
    assert "non-trainable  32" in text and "learning_rate  0.001" in text
    assert "learning rate" not in text  # the config's `learning_rate` says it: once


def test_show_is_the_terse_layout_of_the_same_facts() -> None:
    doc = _doc()
    shown = show_text(doc)
    f = card.facts(doc)
    assert (
        f"parameters {dict(f.parameters)['total']} ({dict(f.parameters)['trainable']} trainable)"
        in shown
    )
    assert "optimizer Adam  learning rate 0.001" in shown
    assert "optimizer config (Adam) beta_1=0.9" in shown  # the learning rate once
    assert "metric val_loss = 0.25 (csv:training.log)" in shown
    assert "\x1b" not in shown


def test_an_artifact_card_is_not_resumable_and_loads_the_artifact() -> None:
    artifact = {
        "kind": "inference",
        "path": "/data/runs/exp|1/e03.inference.keras",
        "bytes": 1200,
        "hash": "blake3:cd",
        "created_at": "t2",
    }
    doc = _doc(
        artifacts=[
            artifact,
            {
                "kind": "card",
                "path": "/data/runs/exp|1/e03.inference.md",
                "bytes": 9,
                "hash": None,
                "created_at": "t2",
            },
        ]
    )
    f = card.facts(doc, CONFIG, artifact)
    assert dict(f.what)["resumable"].startswith("no")
    assert dict(f.sizes)["optimizer state"] == "0 B" and dict(f.sizes)["file"] == "1.2 kB"
    assert dict(f.lineage)["derived from"] == "exp|1/e03.keras"
    assert "artifact card" not in dict(f.lineage)  # the card does not list itself
    assert f.optimizer == [] and "e03.inference.keras" in f.load
    assert not [n for n in f.notes if n.startswith("resume")]


def test_load_lines_per_format_with_hdf5plugin_for_zstd() -> None:
    h5 = card.load_line("/r/w.h5", Format.KERAS_LEGACY_H5, "2.21.0", codec="zstd")
    assert h5 == 'import hdf5plugin; import tf_keras; model = tf_keras.models.load_model("/r/w.h5")'
    assert "hdf5plugin" not in card.load_line(
        "/r/w.h5", Format.KERAS_LEGACY_H5, "3.15.1", codec="gzip"
    )
    assert card.load_line("/r/w.weights.h5", Format.KERAS_WEIGHTS_H5, "3.15.1").startswith(
        'model.load_weights("/r/w.weights.h5")'
    )
    assert "Checkpoint" in card.load_line("/r/ckpt-2", Format.TF_CHECKPOINT, None)
    export = card.load_line("/r/e.json", Format.KERAS_ZIP, "3.15.1", {"kind": "json+h5"})
    assert 'model_from_json(open("/r/e.json").read())' in export
    assert 'load_weights("/r/e.weights.h5")' in export


def test_a_name_with_backticks_cannot_leave_the_code_block() -> None:
    md = card_layouts.markdown(card.facts(_doc(path="/data/runs/exp|1/a```b.keras"), CONFIG))
    block = md.split("## How to load it\n\n", 1)[1]
    fence = block.split("python\n", 1)[0]
    assert fence == "````" and block.count(fence) == 2


def test_identifiers_grep_as_written_and_line_starts_make_no_blocks() -> None:
    layers = [
        {"name": name, "class_name": "Dense", "n_params": 0, "weights": []}
        for name in ("hidden_a", "_private_", "a\\|b", "`tick`")
    ]
    notes = ["1. not a list", "# not a heading", "- not an item", "an_identifier note"]
    md = card_layouts.markdown(
        card.facts(_doc(layers=layers, notes=notes, model_name="net_a"), CONFIG)
    )
    assert "| `hidden_a` | `Dense` |" in md and "| `_private_` |" in md
    assert "| a\\\\\\|b | `Dense` |" in md  # a backslash before a pipe: escaped text, no span
    assert "| `` `tick` `` |" in md
    assert "| model | Functional net_a |" in md
    assert "- 1\\. not a list\n- \\# not a heading\n- \\- not an item\n" in md
    assert "- an_identifier note\n" in md


def test_weights_with_optimizer_state_are_not_called_weights_only() -> None:
    """A DCP or Orbax folder, a torch file: no architecture, and the optimizer state it resumes
    with is named (the card said "weights only")."""
    folder = card_layouts.text(card.facts(_doc(format="torch-dcp", kind="weights")))
    assert "torch-dcp (weights + optimizer state, no architecture)" in folder
    alone = card_layouts.text(
        card.facts(_doc(format="safetensors", kind="weights", optimizer_bytes=0))
    )
    assert "safetensors (weights only)" in alone


def test_a_torch_card_has_no_keras_rows_and_a_keras_card_keeps_them() -> None:
    """Issue 41: `ckpt describe` of a torch model showed a "keras -" row."""
    for fmt in ("torch-zip", "lightning-ckpt", "hf-folder", "safetensors"):
        doc = _doc(format=fmt, keras_version=None, backend=None, optimizer_config=None)
        f = card.facts(doc)
        assert "keras" not in dict(f.what) and "backend" not in dict(f.what), fmt
        rows = [line.split() for line in card_layouts.text(f).splitlines() if line.strip()]
        assert not [r for r in rows if r[0] in ("keras", "backend")], fmt
        assert ", keras" not in show_text(doc) and ", backend" not in show_text(doc), fmt
    unknown = card.facts(_doc(keras_version=None))  # a Keras file of unknown version: said so
    assert dict(unknown.what)["keras"] == "-" and dict(unknown.what)["backend"] == "-"
    assert "keras 3.15.1, backend -" in show_text(_doc())
