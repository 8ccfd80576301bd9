"""A DeepSpeed tag folder as the catalog sees it: its info, its reader, and the DeepSpeed state
inside a Hugging Face Trainer folder.

`read` is the folder reader of the `deepspeed-zero` layout (`formats.folder_readers`), run in
the reader child: the tag's info (`formats.deepspeed_zero` read the records) when every rank
file is there and whole, else `UnfinishedSave` naming what is missing or cut (the indexer judges
incomplete, then abandoned). A Trainer run with a DeepSpeed config saves `checkpoint-N/` with
`latest` and the tag folder inside it instead of `optimizer.pt`/`scheduler.pt`: the HF folder
is the catalog entry (its layout owns its subfolders), the tag folder its resume state
(`in_trainer_folder`), judged by the same rules.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..core.errors import UnfinishedSave
from ..core.model import CheckpointInfo, Format, Kind, OptimizerInfo
from ..fs import beneath
from . import pickle_safe, torch_state
from .deepspeed_zero import LATEST, ZeroFolder, look, numel
from .hf_weights import Weights


def weights_of(zf: ZeroFolder) -> Weights:
    """A Trainer folder's weights when its only copy is DeepSpeed's (ZeRO-3 saves no
    model.safetensors unless `stage3_gather_16bit_weights_on_model_save`)."""
    info = info_of(zf)
    where = f"{zf.tag}/ (DeepSpeed's partitions only: `ckpt split` consolidates them)"
    note = f"no weights file: the model's only copy is in {where}"
    return Weights([], list(info.layers), info.n_params or 0, info.weights_bytes or 0,
                   "torch", [note])  # fmt: skip


def info_of(zf: ZeroFolder) -> CheckpointInfo:
    """The catalog's info: the full model's shapes, the optimizer, the sharding facts."""
    rows = []
    module = dict(zf.module)
    for group in (*zf.param_shapes, zf.frozen_shapes):
        for name, shape in group:
            held = module.get(name)
            dtype = held.dtype if held is not None and held.numel else "float32"
            rows.append((name, dtype, shape, numel(shape) * pickle_safe.ITEM_SIZES.get(dtype, 4)))
    rows += [(n, t.dtype, t.shape, t.nbytes) for n, t in zf.buffers]
    layers, n_params, weights_bytes = torch_state.tensors_info(rows)
    optimizer = optimizer_of(zf)
    sharding = sharding_of(zf)
    notes = []
    if (why := zf.weights_complete()) is not None:
        notes.append(f"the weights live only in the optimizer partitions: {why}")
    return CheckpointInfo(
        format=Format.DEEPSPEED_ZERO,
        kind=Kind.FULL if optimizer is not None else Kind.WEIGHTS,
        backend="torch",
        model_name=None,
        layers=layers,
        n_params=n_params,  # buffers counted, as for every torch state dict (docs)
        weights_bytes=weights_bytes,
        optimizer=optimizer,
        training_config={"deepspeed": zf.ds_config, "sharding": sharding},
        notes=tuple(notes),
        recorded={"step": zf.global_steps, "sharding": sharding},
    )


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """The reader of `formats.folder_readers` (in the reader child): the tag's info when every
    rank file is there and whole; UnfinishedSave naming what is missing or cut (the indexer
    judges incomplete or abandoned by age); `latest` not naming it rides in a note."""
    from .folder_saves import UNCONFIRMED_NOTE

    zf = look(folder, root)
    if zf.unfinished:
        raise UnfinishedSave("; ".join(zf.unfinished[:3]))
    info = info_of(zf)
    notes = (*info.notes, *(UNCONFIRMED_NOTE + sign for sign in zf.unconfirmed))
    return dataclasses.replace(info, notes=notes)


def in_trainer_folder(folder: Path, names: frozenset[str], root: Path | None) -> ZeroFolder | None:
    """The DeepSpeed state of the Trainer folder `folder` (`latest` naming a tag folder in it),
    or None when it has none; UnfinishedSave when a rank's file is missing or cut."""
    if LATEST not in names:
        return None
    named = beneath.read_bounded(folder / LATEST, 4096, root)
    tag = (named or b"").decode("utf-8", "replace").strip()
    if not tag or "/" in tag or tag in (".", ".."):
        return None
    if not (folder / tag).is_dir() or (folder / tag).is_symlink():
        raise UnfinishedSave(f"{LATEST} names {tag!r}, which is not there")
    zf = look(folder / tag, root)
    if zf.unfinished:
        raise UnfinishedSave(f"DeepSpeed state {tag}: " + "; ".join(zf.unfinished[:3]))
    return zf


def optimizer_of(zf: ZeroFolder) -> OptimizerInfo | None:
    """The optimizer of the partitions (DeepSpeed's config names its type), or None."""
    configured = zf.ds_config.get("optimizer")
    configured = configured if isinstance(configured, dict) else None
    optimizer_type = configured.get("type") if configured else None
    state_bytes = sum(f.size for n, f in zf.files.items() if n.endswith("_optim_states.pt"))
    if not state_bytes:
        return None
    named = optimizer_type if isinstance(optimizer_type, str) else None
    return OptimizerInfo(named, named, configured, zf.global_steps, state_bytes=state_bytes)


def sharding_of(zf: ZeroFolder) -> dict[str, object]:
    return {
        "stack": "deepspeed",
        "zero_stage": zf.zero_stage,
        "world_size": zf.world_size,
        "dp_world_size": zf.dp_world_size,
        "mp_world_size": zf.mp_world_size,
        "ds_version": zf.ds_version,
        "tag": zf.tag,
        "files": list(zf.expected),
    }
