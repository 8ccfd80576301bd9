"""Load a Hugging Face checkpoint folder and the inference folder split from it, in a child
process, and compare them: `ckpt verify --load` of an HF folder with an inference folder.

    python -m ckpt_daemon.children.hf_load_probe CHECKPOINT_FOLDER INFERENCE_FOLDER

What it runs, in order: torch imported (transformers too, if it is installed); both folders
staged privately, in the sandbox (`children.unprivileged`); then:

1. every weight file of each folder loaded (`safetensors.torch.load_file`, no pickle; a `.bin`
   with `torch.load(weights_only=True)`, `TORCH_FORCE_WEIGHTS_ONLY_LOAD` set), and the inference
   folder's tensors compared with the checkpoint's by name: dtype, shape and bytes;
2. with transformers: the class config.json names (`architectures[0]`, looked up by name in the
   `transformers` package only, never the folder's own code: no `trust_remote_code`) built with
   `from_pretrained(folder, local_files_only=True)` from each folder, in eval mode, and both
   asked to predict on one fixed input (token ids below the config's `vocab_size`); the outputs
   compared byte for byte. Without transformers, or for a model that takes no token ids, the
   tensors' identity is the answer and the JSON says why nothing was predicted.

Prints one JSON object: {"tensors": T, "identical": bool, "differs": [...], "predicts":
true|false|null, "why_not_predicted": "...", "class": "...", "sandbox": "..."}, or {"refused": ...}
(weights_only said no), or {"error": ...}. The daemon and the CLI never import torch.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from ..formats import pickle_allowed
from . import protocol, unprivileged
from .torch_load_probe import same_bytes, weights_only_globals

TIMEOUT_SECONDS = 600.0
_PROBE_TOKENS = 8


def probe(checkpoint: Path, inference: Path, *, mode: str = "require") -> dict[str, Any]:
    """The parent's side (`unprivileged.run_probe`)."""
    cmd = [*python_module("children.hf_load_probe"), str(checkpoint), str(inference)]

    def settings(env: dict[str, str]) -> None:
        unprivileged.torch_weights_only(env)
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # never the network
        env |= {"HF_HOME": env[unprivileged.STAGING_ENV], "TOKENIZERS_PARALLELISM": "false"}

    return unprivileged.run_probe(
        cmd, [checkpoint, inference], TIMEOUT_SECONDS, settings, mode=mode
    )


def _weights(torch: Any, folder: str) -> dict[str, Any]:
    """Every tensor of the folder's weight files, by name."""
    tensors: dict[str, Any] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".safetensors"):
            tensors |= importlib.import_module("safetensors.torch").load_file(path)
        elif name.endswith(".bin") and name.startswith("pytorch_model"):
            refused = pickle_allowed.torch_file_refusals(path, weights_only_globals(torch))
            if refused:  # judged from its opcodes, before torch's unpickler sees a byte
                raise pickle.UnpicklingError(f"{name} names {', '.join(refused[:5])}: refused")
            tensors |= torch.load(path, weights_only=True, map_location="cpu")
    return tensors


def _predict(torch: Any, checkpoint: str, inference: str) -> dict[str, Any]:
    """Both folders built by their config's transformers class and asked the same question."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        return {"predicts": None, "why_not_predicted": "transformers is not installed"}
    with open(os.path.join(checkpoint, "config.json"), "rb") as f:
        config = json.loads(f.read(1 << 20))
    archs = config.get("architectures") or []
    name = archs[0] if archs and isinstance(archs[0], str) else ""
    cls = getattr(transformers, name, None) if name.isidentifier() else None
    if cls is None or not hasattr(cls, "from_pretrained"):
        why = f"config.json names {name or 'no class'}, not a transformers class"
        return {"predicts": None, "why_not_predicted": why}
    vocab, positions = config.get("vocab_size"), config.get("max_position_embeddings")
    if not isinstance(vocab, int) or vocab < 2:
        return {"predicts": None, "why_not_predicted": f"{name} takes no token ids", "class": name}
    length = min(_PROBE_TOKENS, positions) if isinstance(positions, int) else _PROBE_TOKENS
    ids = torch.randint(1, vocab, (1, length), generator=torch.Generator().manual_seed(0))
    outputs = []
    for folder in (checkpoint, inference):
        model = cls.from_pretrained(folder, local_files_only=True).eval()
        with torch.no_grad():
            out = model(input_ids=ids)
        logits = getattr(out, "logits", None)
        outputs.append(logits if logits is not None else out[0])
    return {"predicts": same_bytes(torch, outputs[0], outputs[1]), "class": name}


def main(argv: list[str]) -> int:
    usage = "hf_load_probe CHECKPOINT INFERENCE"
    return protocol.answer(len(argv) == 2, usage, lambda: _answer(*argv))


def _answer(checkpoint_folder: str, inference_folder: str) -> dict[str, Any]:
    unprivileged.torch_weights_only(os.environ)
    torch = importlib.import_module("torch")
    checkpoint = unprivileged.stage_folder(checkpoint_folder, index=0)
    inference = unprivileged.stage_folder(inference_folder, index=1)
    confined = unprivileged.confinement()
    try:
        source, split = _weights(torch, checkpoint), _weights(torch, inference)
    except pickle.UnpicklingError as exc:
        return {"refused": str(exc).strip().splitlines()[0][:300], "sandbox": confined}
    differs = [
        n for n, t in split.items() if n not in source or not same_bytes(torch, t, source[n])
    ]
    differs += [n for n in source if n not in split]
    return {
        "tensors": len(split),
        "identical": not differs and bool(split),
        "differs": differs[:20],
        "sandbox": confined,
        **_predict(torch, checkpoint, inference),
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
