"""DeepSpeed ZeRO checkpoints: a tag folder (`global_stepN/`) of per-rank torch files, read whole.

`engine.save_checkpoint(save_dir, tag)` writes, from every rank, into `save_dir/<tag>/`:
`mp_rank_XX_model_states.pt` (ZeRO 0-2: one per model-parallel rank, the module's full
weights in the trained dtype, `param_shapes`, `ds_config`, `ds_version`, `dp_world_size`) or
`zero_pp_rank_R_mp_rank_XX_model_states.pt` (ZeRO-3: one per rank, the module's parameters as
placeholders of shape [0]), and `[bf16_]zero_pp_rank_R_mp_rank_XX_optim_states.pt` (each
data-parallel rank's partition: its flat fp32 master weights and the optimizer state of them);
then rank 0 writes `save_dir/latest` naming the tag. There is no barrier between the ranks'
files and `latest`, and no commit marker: a tag is whole when every file the world size
declared is there and a whole torch zip (its central directory, written last, readable; each
storage its pickle names at least its size), and it is confirmed when `latest` names it or a
newer tag. Only the pickles are read (through `pickle_safe`, DeepSpeed's classes as
`deepspeed_records`), never a tensor's bytes.

`look(folder)` gathers what the verdict judges (`core.save_verdict`): a missing or cut rank
file is an unfinished sign (incomplete while the folder changes, abandoned once it settled),
`latest` not naming it an unconfirmed one (a save may run without `save_latest`);
`formats.deepspeed_tag` makes the catalog's info of it.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint
from ..fs import beneath
from . import pickle_safe, torch_state, torch_zip, window
from .deepspeed_records import ZeroStage
from .pickle_safe import TensorRecord

LATEST = "latest"
MAX_RANKS = 1 << 16  # the largest DeepSpeed jobs run ~10^4 ranks
MODEL_STATES = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
RANK_FILE = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(model|optim)_states\.pt$")


def is_zero_file(name: str) -> bool:
    return bool(MODEL_STATES.match(name) or RANK_FILE.match(name))


@dataclass(frozen=True)
class RankFile:
    name: str
    obj: Any  # the pickle's object, DeepSpeed's classes as records; None if not read
    prefix: str  # the zip's record prefix (`<stem>/`): storages are `<prefix>data/<key>`
    size: int


@dataclass(frozen=True)
class ZeroFolder:
    """What a tag folder's small records say (see the module doc)."""

    path: Path
    tag: str
    zero_stage: int | None
    dp_world_size: int
    mp_world_size: int
    ds_version: str | None
    param_shapes: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]  # per param group
    frozen_shapes: tuple[tuple[str, tuple[int, ...]], ...]
    buffers: tuple[tuple[str, TensorRecord], ...]  # the module's buffers (model states)
    module: tuple[tuple[str, TensorRecord], ...]  # the module's tensors in `model_states`
    global_steps: int | None
    files: dict[str, RankFile]  # every rank file read, by name
    expected: tuple[str, ...]  # the files the world size declares
    optimizer_prefix: str  # "" or "bf16_"
    ds_config: dict[str, Any] = field(default_factory=dict)
    unfinished: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.dp_world_size * self.mp_world_size

    def optim_files(self) -> list[str]:
        """The optimizer partitions in rank order (model-parallel rank 0)."""
        p = self.optimizer_prefix
        return [
            f"{p}zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(self.dp_world_size)
        ]

    def weights_complete(self) -> str | None:
        """None when the model-states files alone hold every parameter's values (ZeRO 0-2:
        the module's full weights), else why not (ZeRO-3: placeholders of shape [0])."""
        module = dict(self.module)
        for group in (*self.param_shapes, self.frozen_shapes):
            for name, shape in group:
                held = module.get(name)
                if held is None:
                    return f"model states hold no {name}"
                if held.numel != numel(shape):  # ZeRO-3's module: shape [0], numel 0
                    return (
                        f"model states hold {name} as a placeholder of shape "
                        f"{list(held.shape)} (its shape is {list(shape)}): ZeRO-3 partitions"
                    )
        return None


def read_torch_zip(path: Path, root: Path | None) -> RankFile:
    """One rank file's pickle (nothing else read); CorruptCheckpoint when it is not a whole
    torch zip (no central directory yet, a member missing or short)."""
    with os.fdopen(beneath.open_regular(path, root), "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        try:
            window.check_directory(raw)
            archive = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise CorruptCheckpoint(f"{path.name} is not a whole torch file ({exc})") from exc
        with archive:
            member = torch_zip.pickle_member(archive)
            if member is None:
                raise CorruptCheckpoint(f"{path.name} is a zip but no torch file")
            prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
            data = window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES)
            obj = pickle_safe.load(data)
            members = {i.filename: i for i in archive.infolist()}
            for name, tensor in pickle_safe.walk(obj).tensors:
                ref = tensor.storage
                info = members.get(f"{prefix}data/{ref.key}") if ref else None
                if ref is not None and (info is None or info.file_size < ref.nbytes):
                    raise CorruptCheckpoint(f"{path.name}: the storage of {name} is cut")
    return RankFile(path.name, obj, prefix, size)


def look(folder: Path, root: Path | None = None) -> ZeroFolder:
    """The tag folder's records and the signs of a save not finished (see the module doc)."""
    names = {e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False)}
    files: dict[str, RankFile] = {}
    signs: list[str] = []

    def read(name: str) -> RankFile | None:
        if name in files:
            return files[name]
        if name not in names:
            signs.append(f"{name} missing")
            return None
        try:
            files[name] = read_torch_zip(folder / name, root)
        except CorruptCheckpoint as exc:
            signs.append(str(exc))
            return None
        return files[name]

    first = next(
        (
            n
            for n in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")
            if n in names
        ),
        None,
    )
    if first is None:
        raise_empty = [n for n in names if is_zero_file(n)]
        signs.append("no rank's model states yet (mp_rank_00 / zero_pp_rank_0)")
        return _empty(folder, tuple(signs), tuple(sorted(raise_empty)))
    model = read(first)
    top = model.obj if model is not None and isinstance(model.obj, dict) else {}
    dp, mp = _int(top.get("dp_world_size"), 1), _int(top.get("mp_world_size"), 1)
    if dp < 1 or mp < 1 or dp * mp > MAX_RANKS:  # a hostile count would list a billion files
        raise CorruptCheckpoint(
            f"{first}: dp_world_size {dp} x mp_world_size {mp} is not a world of at most "
            f"{MAX_RANKS} ranks: refused"
        )
    ds_config = _dict(top.get("ds_config"))
    stage = _stage_of(ds_config)
    prefix = "bf16_" if any(n.startswith("bf16_zero_pp_rank_") for n in names) else ""
    expected: list[str] = []
    for m in range(mp):
        if first.startswith("zero_pp_rank_"):
            expected += [f"zero_pp_rank_{r}_mp_rank_{m:02d}_model_states.pt" for r in range(dp)]
        else:
            expected.append(f"mp_rank_{m:02d}_model_states.pt")
        if stage != 0 or prefix or any(RANK_FILE.match(n) for n in names):
            expected += [
                f"{prefix}zero_pp_rank_{r}_mp_rank_{m:02d}_optim_states.pt" for r in range(dp)
            ]
    for name in expected:
        read(name)
    optim = files.get(f"{prefix}zero_pp_rank_0_mp_rank_00_optim_states.pt")
    osd = _optimizer_dict(optim.obj) if optim else {}
    if isinstance(osd.get("zero_stage"), ZeroStage):
        stage = int(osd["zero_stage"])
    partitions = osd.get("partition_count")
    counts = partitions if isinstance(partitions, list) else [partitions]
    if optim is not None and any(isinstance(c, int) and c != dp for c in counts):
        signs.append(f"optimizer partitions count {partitions}, model states say {dp} ranks")
    module = _dict(top.get("module"))
    buffer_names = _list(top.get("buffer_names"))
    tensors = [(str(k), v) for k, v in module.items() if isinstance(v, TensorRecord)]
    return ZeroFolder(
        path=folder,
        tag=folder.name,
        zero_stage=stage,
        dp_world_size=dp,
        mp_world_size=mp,
        ds_version=top.get("ds_version") if isinstance(top.get("ds_version"), str) else None,
        param_shapes=tuple(_shapes(g) for g in _list(top.get("param_shapes"))),
        frozen_shapes=_shapes(top.get("frozen_param_shapes")),
        buffers=tuple((k, v) for k, v in tensors if k in buffer_names),
        module=tuple(tensors),
        global_steps=_int(top.get("global_steps"), None),
        files=files,
        expected=tuple(expected),
        optimizer_prefix=prefix,
        ds_config=torch_state.plain(ds_config) if ds_config else {},
        unfinished=tuple(signs),
        unconfirmed=_latest_sign(folder),
    )


def _empty(folder: Path, signs: tuple[str, ...], present: tuple[str, ...]) -> ZeroFolder:
    return ZeroFolder(folder, folder.name, None, 1, 1, None, (), (), (), (), None, {}, present,
                      "", {}, signs, ())  # fmt: skip


def _latest_sign(folder: Path) -> tuple[str, ...]:
    """Unconfirmed unless `latest` beside the tag names it or a tag saved after it."""
    latest = beneath.read_bounded(folder.parent / LATEST, 4096)
    if latest is None:
        return (f"no {LATEST} beside it (rank 0 writes it after the save)",)
    named = latest.decode("utf-8", "replace").strip()
    if named == folder.name:
        return ()
    try:
        newer = os.lstat(folder.parent / named).st_mtime_ns >= os.lstat(folder).st_mtime_ns
    except OSError:
        newer = False
    return () if newer else (f"{LATEST} names {named!r}, not this tag",)


def _stage_of(config: dict[str, Any]) -> int | None:
    """The configured ZeRO stage; 0 (DeepSpeed's default) when the config sets none."""
    zero = config.get("zero_optimization", {})
    stage = zero.get("stage", 0) if isinstance(zero, dict) else None
    return stage if isinstance(stage, int) and not isinstance(stage, bool) else None


def _optimizer_dict(obj: Any) -> dict[str, Any]:
    found = obj.get("optimizer_state_dict") if isinstance(obj, dict) else None
    return found if isinstance(found, dict) else {}


def _dict(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _shapes(group: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if not isinstance(group, dict):
        return ()
    return tuple(
        (str(k), tuple(v))
        for k, v in group.items()
        if isinstance(v, tuple) and all(isinstance(d, int) for d in v)
    )


def _int(value: Any, default: Any) -> Any:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )
