"""`ckpt verify --load` of folder checkpoints: an Orbax step folder restored with jax + orbax, a
DCP folder with torch (`children.folder_load_probe`: a staged copy, in `children.sandbox`; a
DCP `.metadata` naming or calling anything outside DCP's allow-list is refused from its
opcodes, here before any child starts and again in the child on its copy; the child builds the
Metadata itself and hands it to DCP, which never unpickles it), and the arrays it loaded
compared with the weights the catalog indexed. A Hugging Face folder with its inference folder
(`children.hf_load_probe`): both loaded, their tensors compared byte for byte, and where
transformers is installed both built with `from_pretrained` and asked the same question."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import CkptError
from ..core.model import Checkpoint, CheckpointStatus, Format
from ..formats import dcp_folder, pickle_ops
from ..fs import beneath
from . import guards

LIBRARIES = {Format.ORBAX: ("orbax", "orbax"), Format.TORCH_DCP: ("dcp", "torch")}
LIBRARIES[Format.MEGATRON_DIST] = ("dcp", "torch")  # its tensors are a DCP save


def load(c: Checkpoint, mode: str) -> tuple[bool, str]:
    """(ok, detail) of loading `c`, an Orbax or DCP folder, in a child."""
    from ..children import folder_load_probe

    if c.status != CheckpointStatus.OK:
        return not_run(c)
    kind, library = LIBRARIES.get(c.format, ("", "")) if c.format else ("", "")
    foreign = _dcp_foreign(Path(c.path)) if kind == "dcp" else []
    if foreign:  # judged from the opcodes here, no child started; the child judges its copy too
        return False, f"load refused, nothing of the file run: .metadata names {_names(foreign)}"
    try:
        result = folder_load_probe.probe(kind, Path(c.path), mode=mode)
    except (CkptError, OSError) as exc:
        return False, f"load with {library} not run: {guards.one_line(exc)}"
    if "missing" in result:
        return True, f"load: not checked ({result['missing']} not installed)"
    if "refused" in result:
        return False, f"load refused, nothing of the file run: {result['refused']}"
    if "error" in result:
        return False, f"load with {library} failed: {result['error']}"
    arrays = {str(k): tuple(v) for k, v in dict(result["arrays"]).items()}
    done = f"loads with {library} ({len(arrays)} arrays, {result['sandbox']})"
    differs = _differs(c, arrays)
    if differs:
        return False, f"{done}; differs from the catalog: {', '.join(differs[:5])}"
    return True, f"{done}; the {len(_indexed(c))} indexed weights' shapes match"


def not_run(c: Checkpoint) -> tuple[bool, str]:
    """An unreadable checkpoint: the reader already said what is wrong, no loader is handed it."""
    return False, f"load: not run ({c.status.value}: {c.reason})"


def _dcp_foreign(folder: Path) -> list[str]:
    """What a DCP folder's `.metadata` names or calls outside DCP's allow-list (its opcodes
    only: nothing built); [] when unreadable here (the child says why)."""
    try:
        data = beneath.read_bounded(folder / dcp_folder.METADATA, pickle_ops.MAX_PICKLE_BYTES)
    except (CkptError, OSError):
        return []
    return [] if data is None else dcp_folder.foreign_globals(data)


def _names(foreign: list[str]) -> str:
    return ", ".join(foreign[:5]) + (f" (and {len(foreign) - 5} more)" if len(foreign) > 5 else "")


def _indexed(c: Checkpoint) -> dict[str, tuple[int, ...]]:
    weights = [w for layer in c.details.get("layers", []) for w in layer.get("weights", [])]
    return {str(w["name"]): tuple(w.get("shape") or ()) for w in weights}


def _differs(c: Checkpoint, arrays: dict[str, tuple[int, ...]]) -> list[str]:
    """Indexed weights the load did not give back with the indexed shape (a scalar may come
    back as a plain number: no array)."""
    out = []
    for name, shape in _indexed(c).items():
        if name not in arrays:
            if shape:
                out.append(f"{name} not loaded")
        elif arrays[name] != shape:
            out.append(f"{name} {'x'.join(map(str, arrays[name]))} (indexed {shape})")
    return out


def hf_inference(c: Checkpoint, inference: Path, mode: str) -> tuple[bool, str]:
    """(ok, detail) of loading the HF folder `c` and its inference folder in a child."""
    from ..children import hf_load_probe

    try:
        result = hf_load_probe.probe(Path(c.path), inference, mode=mode)
    except (CkptError, OSError) as exc:
        return False, f"load with torch not run: {guards.one_line(exc)}"
    if "refused" in result:
        return False, f"load refused by torch (weights_only), nothing run: {result['refused']}"
    if "error" in result:
        return False, f"load failed: {result['error']}"
    done = f"loads with torch, weights_only ({result['tensors']} tensors, {result['sandbox']})"
    if not result["identical"]:
        differs = ", ".join(result.get("differs") or []) or "no tensors"
        return False, f"{done}; inference folder holds different tensors: {differs}"
    done += "; inference folder holds identical tensors"
    if result.get("predicts") is None:
        return True, f"{done} (not predicted: {result.get('why_not_predicted')})"
    how = f"{result['class']}.from_pretrained"
    if not result["predicts"]:
        return False, f"{done}, but predicts differently through {how}"
    return True, f"{done} and predicts identically through {how}"
