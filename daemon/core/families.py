"""The format table: one row per format says everything the rest of the code asks of a format.

A row (`Family`) names its format (the catalog's value), how its checkpoints are found and
read, when one is complete, whether training resumes from it, how it is split (or why not) and
how `verify --load` loads it. Whatever differs from one format to another is read from its
row (`row(format)`); nothing else names a format to decide. A new format is one module (its
reader, its rules) and one row: below for a built-in one, or `register(Family(...))` from
the format's own module. The parts that do I/O are named by reference, "layer.module:attribute"
(or given as the object itself by a format outside the package), and resolved by the layer
that runs them (`resolve`): the table stays pure and no arrow points up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from . import resume_rules as rules
from .model import Format
from .resume_rules import ResumeRule, never

# A part that does I/O: "layer.module:attribute", or the object itself. Readers are `formats`'
# (a file's: `read(raw, head, size) -> info | None`, None when the bytes are not its; a
# folder's: `read(folder, root) -> info`); layouts `fs`' (`fs.folder_layouts.FolderLayout`);
# splitters `transforms`' (a module with `split` and `inference_path`, called by usecases);
# loads `usecases`' (`load(checkpoint, mode) -> (ok, detail)`).
Ref = str | object
# Completeness rules: a read problem is `incomplete` until the file has settled, `corrupt` after
# (core.completion); or, for a folder an async save fills, the save's own signs and its writers
# decide (core.save_verdict, usecases.save_checks).
SETTLE, SAVE = "settle", "save"


@dataclass(frozen=True)
class Family:
    """One format's row. `module`: set by a format outside the package; the reader child
    imports it too (`extra_modules`), so that the child knows the row."""

    format: Format
    resume: ResumeRule  # pure: resumable or not, and why (core.resume_rules)
    reader: Ref | None = None
    suffixes: tuple[str, ...] = ()  # file names discovery offers the file readers
    layout: Ref | None = None  # a folder format's: it recognises a folder from names alone
    folder: bool = False  # one checkpoint of a whole folder: members, moved as one unit
    completeness: str = SETTLE
    splitter: Ref | None = None  # None: transforms.split judges it (and refuses)
    split_refusal: str | None = None  # why it is never split (exit 2, before anything)
    # Pure: whether the schedule and retention's demotions may split this checkpoint (None:
    # every one its splitter takes); False leaves it whole rather than planning a refused split.
    splits: Callable[[Any], bool] | None = None
    compress_refusal: str | None = None  # why it is never compressed
    compressible: bool = False  # compressed in place by transforms.compress
    load: Ref | None = None  # None: `verify --load` says it is not checked
    # The one line of Python that loads it, shown on its model card: `{path}` (quoted), `{lib}`
    # (keras or tf_keras, by the Keras that wrote it), `{model}` (the model's class, else
    # AutoModel); None: "-"
    load_line: str | None = None
    # Who writes it: "keras" (Keras or TensorFlow: the card shows the Keras version, a log row
    # r is epoch r + 1), "torch" (a loop's 0-based epoch index), or None
    writer: str | None = None
    module: str | None = None

    @property
    def may_resume(self) -> bool:
        """Its rule can say yes (the catalog's `--resumable` pre-filter keeps its rows)."""
        return not isinstance(self.resume, never)


_ROWS: dict[str, Family] = {}
T = TypeVar("T")
_CACHE: dict[str, Any] = {}  # answers asked per file or per listed row, until a register


def register(family: Family) -> Family:
    """Add (or replace) the row of `family.format`; its format becomes a known `Format`."""
    family = replace(family, format=Format.add(str(family.format)))
    _ROWS[family.format.value] = family
    _CACHE.clear()
    return family


def unregister(fmt: str) -> None:
    """Forget a row added by `register` (a test's toy format), and its format."""
    _ROWS.pop(str(fmt), None)
    Format.forget(str(fmt))
    _CACHE.clear()


def row(fmt: str | None) -> Family | None:
    """The row of `fmt` (a `Format` or its stored value), None when unknown or None."""
    return _ROWS.get(str(fmt)) if fmt is not None else None


def rows() -> Iterator[Family]:
    """Every row, in order (readers and layouts are tried in it: the first claim wins)."""
    return iter(tuple(_ROWS.values()))


def _cached(name: str, compute: Callable[[], T]) -> T:
    if name not in _CACHE:
        _CACHE[name] = compute()
    return _CACHE[name]


def folder_formats() -> frozenset[Format]:
    """Formats whose checkpoint is a folder: one catalog entry, its files as members."""
    return _cached("folders", lambda: frozenset(r.format for r in rows() if r.folder))


def suffixes() -> tuple[str, ...]:
    """The file names discovery hands to the file readers: every row's `suffixes`."""
    return _cached("suffixes", lambda: tuple(dict.fromkeys(s for r in rows() for s in r.suffixes)))


def extra_modules() -> tuple[str, ...]:
    """Modules outside the package that registered rows (the reader child imports them)."""
    return tuple(dict.fromkeys(r.module for r in rows() if r.module))


def resolve(ref: Ref) -> Any:
    """The object a row's reference names. Called by the layer that owns the part (formats
    for readers, fs for layouts, usecases for splitters and loads), never from here."""
    if not isinstance(ref, str):
        return ref
    if ref not in _RESOLVED:
        module, _, attribute = ref.partition(":")
        loaded = importlib.import_module(f"{_PACKAGE}.{module}")
        _RESOLVED[ref] = getattr(loaded, attribute) if attribute else loaded
    return _RESOLVED[ref]


_PACKAGE = __name__.rsplit(".", 2)[0]  # ckpt_daemon
_RESOLVED: dict[str, Any] = {}

# ---- the built-in rows ----

_TORCH_COMPRESS = (
    "a torch-family file has no lossless compressed form of its own (a compressed "
    ".safetensors or .pt is no longer one its loader opens)"
)
# Keras HDF5 files (formats.keras_h5, the weights store of formats.keras_v3) and `.keras` zips:
# split by dropping their optimizer groups (transforms.split), compressed in place
_h5 = partial(
    Family,
    reader="formats.file_detect:read_hdf5",
    suffixes=(".h5", ".hdf5", ".he5"),
    writer="keras",
    load_line="model.load_weights({path})  # model: built with the same architecture",
)
_keras_h5 = partial(_h5, splitter="transforms.split", compressible=True)
_LOAD_MODEL = "import {lib}; model = {lib}.models.load_model({path})"
_KERAS_LOAD = "usecases.verifier:keras_load"
# torch files (formats.torch_zip, safetensors_file): a zip is Keras's or torch's, by content
_torch = partial(
    Family,
    suffixes=(".pt", ".pth", ".bin", ".ckpt"),
    compress_refusal=_TORCH_COMPRESS,
    load="usecases.verifier:torch_load",
    writer="torch",
    load_line="import torch; state = torch.load({path}, weights_only=True)",
)
_torch_zip = partial(
    _torch, reader="formats.file_detect:read_zip", splitter="transforms.torch_split"
)
# async saves: a step folder an Orbax or DCP writer fills (formats.folder_saves)
_save = partial(
    Family,
    reader="formats.folder_saves:read",
    folder=True,
    completeness=SAVE,
    load="usecases.folder_load:load",
)

# Large-model stacks (issue 44): their layouts (fs.sharded_names), readers (formats.rank_files,
# formats.megatron), consolidated by transforms.consolidate; tried before plain DCP's layout
_sharded = partial(
    _save, splitter="transforms.consolidate", writer="torch", compress_refusal=_TORCH_COMPRESS
)
for _row in (
    _keras_h5(
        Format.KERAS_LEGACY_H5, rules.keras_legacy_h5, load=_KERAS_LOAD, load_line=_LOAD_MODEL
    ),
    _h5(Format.KERAS_LEGACY_WEIGHTS_H5, rules.keras_legacy_weights, compressible=True),
    _keras_h5(Format.KERAS_WEIGHTS_H5, rules.keras_weights),
    Family(
        Format.KERAS_ZIP,
        rules.keras_archive,
        reader="formats.file_detect:read_zip",
        suffixes=(".keras",),
        splitter="transforms.split",
        compressible=True,
        load=_KERAS_LOAD,
        load_line=_LOAD_MODEL,
        writer="keras",
    ),
    _torch_zip(Format.TORCH_ZIP, rules.torch),
    _torch_zip(
        Format.LIGHTNING,
        rules.lightning,
        load_line="model = Model.load_from_checkpoint({path})  # Model: your LightningModule",
    ),
    _torch(
        Format.TORCH_LEGACY,
        rules.torch,
        reader="formats.file_detect:read_torch_legacy",
        split_refusal="a legacy (pre-1.6) torch file is not split (re-save it with a "
        "current torch: its storages are then a zip's members, copied as they are)",
    ),
    _torch(
        Format.SAFETENSORS,
        rules.safetensors,
        reader="formats.file_detect:read_safetensors",
        suffixes=(".safetensors", ".bin"),
        split_refusal="a safetensors file holds weights only: nothing to split",
        load_line="from safetensors.torch import load_file; state_dict = load_file({path})",
    ),
    # TensorFlow: found by discovery's own rules (a prefix and its shards, saved_model.pb)
    Family(
        Format.TF_CHECKPOINT,
        rules.tf_checkpoint,
        load_line="tf.train.Checkpoint(model=model, optimizer=optimizer).restore({path})",
        writer="keras",
    ),
    Family(
        Format.SAVED_MODEL,
        rules.saved_model,
        folder=True,
        load_line="import tensorflow as tf; loaded = tf.saved_model.load({path})",
        writer="keras",
    ),
    # folder checkpoints (fs.folder_layouts), each read whole by its reader
    Family(
        Format.HF_FOLDER,
        rules.hf_folder,
        reader="formats.hf_folder:read",
        layout="fs.folder_layouts:HF_FOLDER_LAYOUT",
        folder=True,
        splitter="transforms.hf_split",
        compress_refusal="a Hugging Face folder's files have no lossless compressed form "
        "that from_pretrained still opens",
        load="usecases.verifier:torch_load",
        load_line="import transformers; model = transformers.{model}.from_pretrained({path})",
    ),
    _sharded(
        Format.MEGATRON_DIST,
        rules.megatron,
        reader="formats.megatron:read_dist",
        layout="fs.sharded_names:MEGATRON_DIST_LAYOUT",
    ),
    _sharded(
        Format.MEGATRON_LEGACY,
        rules.megatron,
        reader="formats.megatron:read_legacy",
        layout="fs.sharded_names:MEGATRON_LEGACY_LAYOUT",
        load=None,
        # Split by policy only when known to hold one model-parallel rank: how a layer is cut
        # across several is Megatron's code (transforms.consolidate refuses them). A listing's
        # row carries no details: unknown is left whole (`ckpt split` by hand still works).
        splits=lambda c: c.details.get("world_size") == 1,
    ),
    _sharded(
        Format.TORCH_RANKS,
        rules.torch_ranks,
        reader="formats.rank_files:read",
        layout="fs.sharded_names:RANK_FILES_LAYOUT",
        load=None,
    ),
    _save(Format.ORBAX, rules.orbax, layout="fs.folder_layouts:ORBAX_LAYOUT"),
    _save(
        Format.TORCH_DCP,
        rules.dcp,
        layout="fs.folder_layouts:DCP_LAYOUT",
        writer="torch",
        splitter="transforms.consolidate",  # the model consolidated without torch (issue 44)
    ),
    # DeepSpeed ZeRO tag folders (formats.deepspeed_zero, deepspeed_tag): judged as a save
    Family(
        Format.DEEPSPEED_ZERO,
        rules.deepspeed,
        reader="formats.deepspeed_tag:read",
        layout="fs.folder_layouts:DEEPSPEED_LAYOUT",
        folder=True,
        completeness=SAVE,
        splitter="transforms.deepspeed_consolidate",
        compress_refusal="a DeepSpeed tag's rank files have no lossless compressed form that "
        "DeepSpeed still loads",
        load_line="engine.load_checkpoint(os.path.dirname({path}), tag=os.path.basename({path}))",
        writer="torch",
    ),
):
    register(_row)
