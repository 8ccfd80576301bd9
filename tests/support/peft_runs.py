"""Real PEFT LoRA adapters of a tiny BERT (built from a config, never downloaded), written by
peft's own `save_pretrained` in a child process, with the truth of each taken on the writer's side.

Usage (always in a child process: the pytest process never imports torch, transformers or peft)::

    python3 tests/support/peft_runs.py OUT

writes::

    OUT/models/tiny-bert/         the base model (`save_pretrained`): config.json + safetensors
    OUT/runs/linked/lora/         a LoRA adapter of that base loaded from its folder
                                  (`base_model_name_or_path` is the folder's absolute path)
    OUT/runs/orphan/lora/         a LoRA adapter of a model built from a config: its
                                  `base_model_name_or_path` is None (huggingface/peft#1567)
    OUT/runs/bin/lora/            the linked adapter as `adapter_model.bin` (safe_serialization
                                  False: a pickle, read by the restricted unpickler only)
    OUT/runs/trainer/out/checkpoint-2/  a Trainer checkpoint of the LoRA model (adapter files +
                                  optimizer.pt, scheduler.pt, trainer_state.json)
    OUT/peft-truth.json

Generated once per session (`tests.support.shared_fixtures.generated_once`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PEFT_TRUTH = "peft-truth.json"
GENERATE_TIMEOUT_S = 600
CONFIG_KEYS = ("peft_type", "r", "lora_alpha", "target_modules", "base_model_name_or_path")
CONFIG_KEYS += ("revision", "task_type")


def _tiny_model(source: Path | None = None) -> Any:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    if source is not None:
        return BertForSequenceClassification.from_pretrained(str(source))
    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def _lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS")
    return get_peft_model(model, config)


def _truth(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / "adapter_config.json").read_text())
    found = {key: config.get(key) for key in CONFIG_KEYS}
    if isinstance(found["target_modules"], list):
        found["target_modules"] = sorted(found["target_modules"])
    return {"config": found, "files": sorted(p.name for p in folder.iterdir())}


def _trainer(run: Path, base: Path) -> dict[str, Any]:
    import torch
    from transformers import Trainer, TrainingArguments

    class Pairs(torch.utils.data.Dataset[dict[str, Any]]):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(1)
            self.x = torch.randint(1, 64, (16, 8), generator=g)
            self.y = (self.x[:, 0] > 32).long()

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.x[i], "labels": self.y[i]}

    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    args = TrainingArguments(
        output_dir="out",
        max_steps=2,
        save_steps=2,
        per_device_train_batch_size=8,
        use_cpu=True,
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
    )
    Trainer(model=_lora(_tiny_model(base)), args=args, train_dataset=Pairs()).train()
    folder = run / "out" / "checkpoint-2"
    return {**_truth(folder), "global_step": 2}


def write_all(out: Path) -> None:
    base = out / "models" / "tiny-bert"
    _tiny_model().save_pretrained(base)
    linked = _lora(_tiny_model(base))
    linked.save_pretrained(out / "runs" / "linked" / "lora")
    linked.save_pretrained(out / "runs" / "bin" / "lora", safe_serialization=False)
    _lora(_tiny_model()).save_pretrained(out / "runs" / "orphan" / "lora")
    truth: dict[str, Any] = {"base": str(base)}
    for name in ("linked", "bin", "orphan"):
        truth[name] = _truth(out / "runs" / name / "lora")
    truth["trainer"] = _trainer(out / "runs" / "trainer", base)
    (out / PEFT_TRUTH).write_text(json.dumps(truth, indent=1))


def generate(out: Path) -> Path:
    """`write_all(out)` in a child process (offline: nothing is ever downloaded)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env |= {"TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, str(Path(__file__).resolve()), str(out)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, env=env, cwd=out
    )
    if result.returncode != 0:
        raise RuntimeError(f"peft_runs failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return out


if __name__ == "__main__":
    write_all(Path(sys.argv[1]).resolve())
