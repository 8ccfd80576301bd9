"""PEFT adapters (formats.peft_adapter, usecases.lineage) on real LoRA adapters of a tiny BERT,
written by peft's own `save_pretrained` (tests/support/peft_runs.py): each adapter folder is one
checkpoint of kind `adapter` whose path is its folder, with its config's facts; its base model
linked by path or by name to a folder in a root, or said missing (no name: huggingface/peft#1567;
a path that no longer exists); `show` and `describe` show the lineage; split refuses an adapter.
torch, transformers and peft are never imported by the test process."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.support import Workspace

ADAPTERS = ("linked", "bin", "orphan")


def _adapters(ws: Workspace, peft: Path) -> dict[str, Any]:
    """The generated adapters and base copied into the root, plus three copies of the linked
    adapter whose base a user named otherwise: a hub name, a path in the root, a gone path."""
    shutil.copytree(peft / "models", ws.root / "models", copy_function=shutil.copy2)
    for name in (*ADAPTERS, "trainer"):
        shutil.copytree(peft / "runs" / name, ws.root / name, copy_function=shutil.copy2)
    base = ws.root / "models" / "tiny-bert"
    renamed = {"hub": "someone/tiny-bert", "local": str(base), "gone": str(ws.root / "gone" / "b")}
    for name, base_name in renamed.items():
        folder = shutil.copytree(peft / "runs" / "linked" / "lora", ws.root / name / "lora")
        config = json.loads((folder / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base_name
        (folder / "adapter_config.json").write_text(json.dumps(config))
    return json.loads((peft / "peft-truth.json").read_text())


def test_an_adapter_folder_is_one_checkpoint_of_kind_adapter_with_its_config(
    workspace: Workspace, peft_runs: Path
) -> None:
    ws = workspace
    truth = _adapters(ws, peft_runs)
    ws.run("scan")
    rows = {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all")}
    folders = [f"{n}/lora" for n in (*ADAPTERS, "hub", "local", "gone")]
    assert set(rows) == {*folders, "trainer/out/checkpoint-2", "models/tiny-bert"}, rows.keys()
    assert rows["models/tiny-bert"]["kind"] == "weights"
    for path in [*folders, "trainer/out/checkpoint-2"]:
        row = rows[path]
        assert (row["status"], row["format"], row["kind"]) == ("ok", "hf-folder", "adapter"), row
        shown = ws.json("show", str(row["id"]))
        assert shown["path"] == str(ws.root / path)
        name = path.split("/")[0]
        expected = truth.get(name, truth["linked"])["config"]
        adapter = shown["training_config"]["adapter"]
        for key in ("peft_type", "r", "lora_alpha", "target_modules", "task_type", "revision"):
            assert adapter[key] == expected[key], (key, adapter)
        assert sorted(Path(f).name for f in shown["files"]) == sorted(
            p.name for p in (ws.root / path).iterdir()
        )
    # the same adapter as safetensors and as a pickle (.bin, read by the restricted unpickler)
    assert rows["bin/lora"]["n_params"] == rows["linked/lora"]["n_params"] > 0
    trainer = ws.json("show", str(rows["trainer/out/checkpoint-2"]["id"]))
    assert trainer["step"] == 2 and trainer["training_config"]["resumable"] is True
    assert trainer["optimizer_bytes"] > 0
    resumable = ws.json("latest", "--run", "trainer", "--resumable")
    assert resumable["path"] == str(ws.root / "trainer/out/checkpoint-2"), resumable
    assert "PEFT adapter" in resumable["resume_reason"], resumable
    for mod in ("torch", "transformers", "peft", "safetensors"):
        assert mod not in sys.modules, mod


def test_the_base_model_is_linked_by_path_or_name_or_said_missing(
    workspace: Workspace, peft_runs: Path
) -> None:
    ws = workspace
    truth = _adapters(ws, peft_runs)
    ws.run("scan")
    base_id = ws.json("show", str(ws.root / "models" / "tiny-bert"))["id"]

    def base(name: str) -> dict[str, Any]:
        shown = ws.json("show", str(ws.root / name / "lora"))
        assert shown["kind"] == "adapter"
        return dict(shown["base_model"])

    in_root = {"path": str(ws.root / "models" / "tiny-bert"), "checkpoint_id": base_id}
    assert base("local") == {
        "name": str(ws.root / "models" / "tiny-bert"), "revision": None, **in_root,
        "in_root": True, "missing": None,
    }  # fmt: skip
    assert base("hub") == {"name": "someone/tiny-bert", "revision": None, **in_root,
                           "in_root": True, "missing": None}  # fmt: skip
    linked = base("linked")  # the generated base: a folder that exists, outside every root
    assert linked["name"] == truth["base"] and linked["path"] == truth["base"]
    assert (linked["in_root"], linked["missing"], linked["checkpoint_id"]) == (False, None, None)
    orphan = base("orphan")
    assert orphan["name"] is None and "names no base model" in orphan["missing"]
    gone = base("gone")
    assert gone["path"] is None and "does not exist" in gone["missing"], gone
    # describe (the model card) and show's text say the lineage, and what is missing
    card = ws.run("describe", str(ws.root / "orphan" / "lora")).stdout
    assert "base missing" in card and "names no base model" in card, card
    card = ws.run("describe", str(ws.root / "local" / "lora"), "--format", "txt").stdout
    assert "models/tiny-bert" in card and f"checkpoint {base_id}" in card, card
    assert "peft.PeftModel.from_pretrained" in card and "PEFT LORA adapter r=4" in card, card
    text = ws.run("show", str(ws.root / "gone" / "lora")).stdout
    assert "base missing: the base model folder" in text, text


def test_split_refuses_an_adapter_saying_why(workspace: Workspace, peft_runs: Path) -> None:
    ws = workspace
    _adapters(ws, peft_runs)
    ws.run("scan")
    for path in ("linked/lora", "trainer/out/checkpoint-2"):
        result = ws.run("split", str(ws.root / path), check=False)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert "is a PEFT adapter: already small" in result.stderr, result.stderr
        assert not list((ws.root / path).parent.glob("inference*"))
