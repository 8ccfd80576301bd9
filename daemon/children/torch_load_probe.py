"""Load torch-family files with torch, in a child process, and compare an inference artifact with
the checkpoint it was split from: `ckpt verify --load` for `.pt`/`.pth`/`.bin`, Lightning
`.ckpt`, `.safetensors` and a Hugging Face folder's weight files.

    python -m ckpt_daemon.children.torch_load_probe FILE... [--artifact ARTIFACT]

What it runs, in order: torch imported; each file staged privately, in the sandbox
(`children.unprivileged`); then each file loaded: a safetensors file with
`safetensors.torch.load_file` (no pickle at all), anything else with
`torch.load(weights_only=True)` (torch's own restricted unpickler: a GLOBAL outside its allow-
list, `os.system` among them, is refused, never called; the same list is checked first against
the file's opcodes, `formats.pickle_allowed.torch_file_refusals`, as on every pickle path;
`TORCH_FORCE_WEIGHTS_ONLY_LOAD` is set and its opposite removed, so no environment turns it
off). With `--artifact`, the artifact's tensors are compared with the checkpoint's model
tensors of the same names: dtype, shape and bytes. Prints one JSON object: {"loaded": N files,
"tensors": T, "identical": true|false|null, "differs": [...], "sandbox": "..."} or {"refused":
"..."} (weights_only said no) or {"error": "..."}. It runs only as a child process: the daemon
and the CLI never import torch.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from .. import python_module
from ..formats import pickle_allowed
from . import protocol, unprivileged

TIMEOUT_SECONDS = 300.0
_MODEL_KEYS = ("state_dict", "model_state_dict", "model", "model_state", "net", "module")


def probe(
    paths: list[Path], artifact: Path | None = None, *, mode: str = "require"
) -> dict[str, Any]:
    """The parent's side (`unprivileged.run_probe`)."""
    extra = ["--artifact", str(artifact)] if artifact is not None else []
    cmd = [*python_module("children.torch_load_probe"), *map(str, paths), *extra]
    staged = [*paths, *([artifact] if artifact is not None else [])]
    return unprivileged.run_probe(
        cmd, staged, TIMEOUT_SECONDS, unprivileged.torch_weights_only, mode=mode
    )


def _load(torch: Any, path: str) -> Any:
    if path.endswith(".safetensors"):  # imported by name: the daemon package never imports it
        return importlib.import_module("safetensors.torch").load_file(path)
    refused = pickle_allowed.torch_file_refusals(path, weights_only_globals(torch))
    if refused:  # judged from its opcodes, before torch's unpickler sees a byte
        raise pickle.UnpicklingError(f"names {', '.join(refused[:5])}: refused from its opcodes")
    with open(path, "rb") as f:
        is_zip = f.read(4) == b"PK\x03\x04"
    return torch.load(path, weights_only=True, map_location="cpu", mmap=is_zip)


def weights_only_globals(torch: Any) -> set[str]:
    """The globals torch's `weights_only` unpickler accepts here (its own list and any added
    with `torch.serialization.add_safe_globals`)."""
    unpickler = importlib.import_module("torch._weights_only_unpickler")
    names = set(unpickler._get_allowed_globals())
    return names | set(unpickler._get_user_allowed_globals())


def flat(torch: Any, obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor under `obj` by its dotted path; each container once (a pickle can share
    one list a million times over), at most 20 deep."""
    out: dict[str, Any] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(prefix, obj, 0)]
    while stack:
        path, value, depth = stack.pop()
        if torch.is_tensor(value):
            out[path] = value
            continue
        if id(value) in seen or depth > 20 or not isinstance(value, dict | list | tuple):
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            stack.append((f"{path}.{key}" if path else str(key), child, depth + 1))
    return out


def _model_tensors(torch: Any, loaded: list[Any], names: set[str]) -> dict[str, Any]:
    """The checkpoint's tensors the artifact's names refer to: its state dict by a known key
    (as the split took it), else everything."""
    for obj in loaded:
        candidates = [obj[k] for k in _MODEL_KEYS if isinstance(obj, dict) and k in obj]
        for candidate in [*candidates, obj]:
            tensors = flat(torch, candidate)
            if names <= set(tensors):
                return tensors
    merged: dict[str, Any] = {}
    for obj in loaded:
        merged |= flat(torch, obj)
    return merged


def same_bytes(torch: Any, a: Any, b: Any) -> bool:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    # Bytes, not values: NaN equals itself, -0.0 stays -0.0, float8 has no torch.equal.
    return bool(
        torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8),
            b.contiguous().reshape(-1).view(torch.uint8),
        )
    )


def main(argv: list[str]) -> int:
    artifact = None
    if "--artifact" in argv:
        at = argv.index("--artifact")
        artifact, argv = argv[at + 1 : at + 2], argv[:at] + argv[at + 2 :]
    usage = "torch_load_probe FILE... [--artifact A]"
    return protocol.answer(bool(argv) and artifact != [], usage, lambda: _answer(argv, artifact))


def _answer(files: list[str], artifact: list[str] | None) -> dict[str, Any]:
    unprivileged.torch_weights_only(os.environ)
    torch = importlib.import_module("torch")
    staged = unprivileged.stage([*files, *(artifact or [])])
    confined = unprivileged.confinement()
    loaded = []
    for named, copy in zip(files, staged, strict=False):
        try:
            loaded.append(_load(torch, copy))
        except pickle.UnpicklingError as exc:
            reason = str(exc).strip().splitlines()
            return {"refused": f"{Path(named).name}: {_why(reason)}", "sandbox": confined}
    result: dict[str, Any] = {
        "loaded": len(loaded),
        "tensors": sum(len(flat(torch, obj)) for obj in loaded),
        "identical": None,
        "differs": [],
        "sandbox": confined,
    }
    if artifact:
        split = flat(torch, _load(torch, staged[-1]))
        model = _model_tensors(torch, loaded, set(split))
        differs = [
            n for n, t in split.items() if n not in model or not same_bytes(torch, t, model[n])
        ]
        result["identical"] = not differs and bool(split)
        result["differs"] = differs[:20]
        result["artifact_tensors"] = len(split)
    return result


def _why(lines: list[str]) -> str:
    """torch's refusal, the line that names what it refused."""
    named = [ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln]
    return (named or lines or ["refused"])[0][:300]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
