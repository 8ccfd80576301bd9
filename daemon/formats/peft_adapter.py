"""A PEFT adapter's own record: `adapter_config.json`, the small JSON file peft's
`save_pretrained` writes beside `adapter_model.safetensors` (or `.bin`).

The adapter's weights are read by the HF folder's weights reader (`formats.hf_weights`: the
safetensors header, or a `.bin` by the restricted unpickler); this module reads only the config:
which PEFT method (`peft_type`), its rank and scaling (`r`, `lora_alpha`), the modules it adapts
and the base model it was trained on (`base_model_name_or_path`, `revision`). That base is the
adapter's lineage; peft writes None there for a model built from a config, and users lose it
(huggingface/peft#1567): the note says so, since such an adapter cannot be loaded without
knowing its base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..fs.folder_layouts import ADAPTER_CONFIG
from . import hf_weights

MAX_CONFIG_BYTES = 1 << 20
# The keys a card and `show --json` carry (a LoRA's; other methods have the common ones).
_KEYS: tuple[str, ...] = ("peft_type", "r", "lora_alpha", "lora_dropout", "task_type", "revision")
_KEYS += ("base_model_name_or_path", "inference_mode", "use_dora", "modules_to_save")


def read_config(folder: Path, root: Path | None) -> dict[str, Any]:
    """The adapter's facts from `folder/adapter_config.json` (plain JSON values only)."""
    doc = hf_weights.read_json(folder / ADAPTER_CONFIG, root, MAX_CONFIG_BYTES)
    found: dict[str, Any] = {key: _plain(doc.get(key)) for key in _KEYS if key in doc}
    targets = doc.get("target_modules")
    if isinstance(targets, list):
        found["target_modules"] = sorted(str(t) for t in targets)
    elif isinstance(targets, str):  # a regex over module names
        found["target_modules"] = targets
    base = found.get("base_model_name_or_path")
    found["base_model_name_or_path"] = base if isinstance(base, str) and base.strip() else None
    return found


def notes(adapter: dict[str, Any]) -> list[str]:
    """What a user must know before loading the adapter."""
    if adapter.get("base_model_name_or_path") is None:
        return [
            f"{ADAPTER_CONFIG} names no base model (base_model_name_or_path is empty): "
            "PeftModel.from_pretrained needs the base it was trained on, and nothing here says "
            "which"
        ]
    return []


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value)
