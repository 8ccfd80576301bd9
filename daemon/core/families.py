"""The format table: one row per format (`core.family.Family`), every built-in format's here.

Whatever differs from one format to another (its reader, folder layout, completeness rule,
resume rule, splitter or the reason it is not split, its `verify --load` check) is read from
its row; nothing else names a format to decide. To add a format: write its module (a reader
in `formats/`, its layout if it is a folder, a splitter in `transforms/` if it splits) and
register its row, here for a built-in one or with `register` from the format's own module.
Rows are tried in order: the first file reader or folder layout that claims a path wins.
"""

from __future__ import annotations

from . import resume_rules as rules
from .family import (
    SAVE,
    SETTLE,
    Family,
    extra_modules,
    folder_formats,
    register,
    resolve,
    row,
    rows,
    suffixes,
    unregister,
    where,
)
from .model import Format

# Ask the table through this module (importing it loads the built-in rows), never core.family.
__all__ = [
    "SAVE",
    "SETTLE",
    "Family",
    "extra_modules",
    "folder_formats",
    "register",
    "resolve",
    "row",
    "rows",
    "suffixes",
    "unregister",
    "where",
]

_H5 = (".h5", ".hdf5", ".he5")
_TORCH = (".pt", ".pth", ".bin", ".ckpt")
_TORCH_COMPRESS = (
    "a torch-family file has no lossless compressed form of its own (a compressed "
    ".safetensors or .pt is no longer one its loader opens)"
)
_KERAS_SPLIT = "transforms.split"  # Keras HDF5 and .keras: optimizer groups dropped (h5py)
_KERAS_LOAD = "usecases.verifier:keras_load"
_TORCH_LOAD = "usecases.verifier:torch_load"
_FOLDER_LOAD = "usecases.folder_load:load"

for _row in (
    # Keras HDF5 files (formats.keras_h5, keras_v3's weights store)
    Family(
        Format.KERAS_LEGACY_H5,
        rules.keras_legacy_h5,
        may_resume=True,
        reader="formats.file_detect:read_hdf5",
        suffixes=_H5,
        splitter=_KERAS_SPLIT,
        compressible=True,
        load=_KERAS_LOAD,
    ),
    Family(
        Format.KERAS_LEGACY_WEIGHTS_H5,
        rules.keras_legacy_weights,
        reader="formats.file_detect:read_hdf5",
        suffixes=_H5,
        compressible=True,
    ),
    Family(
        Format.KERAS_WEIGHTS_H5,
        rules.keras_weights,
        reader="formats.file_detect:read_hdf5",
        suffixes=_H5,
        splitter=_KERAS_SPLIT,
        compressible=True,
    ),
    # zip archives: a Keras 3 `.keras` or a torch.save zip (formats.keras_v3, torch_zip)
    Family(
        Format.KERAS_ZIP,
        rules.keras_archive,
        may_resume=True,
        reader="formats.file_detect:read_zip",
        suffixes=(".keras",),
        splitter=_KERAS_SPLIT,
        compressible=True,
        load=_KERAS_LOAD,
    ),
    Family(
        Format.TORCH_ZIP,
        rules.torch,
        may_resume=True,
        reader="formats.file_detect:read_zip",
        suffixes=_TORCH,
        splitter="transforms.torch_split",
        compress_refusal=_TORCH_COMPRESS,
        load=_TORCH_LOAD,
    ),
    Family(
        Format.LIGHTNING,
        rules.lightning,
        may_resume=True,
        reader="formats.file_detect:read_zip",
        suffixes=(".ckpt",),
        splitter="transforms.torch_split",
        compress_refusal=_TORCH_COMPRESS,
        load=_TORCH_LOAD,
    ),
    Family(
        Format.TORCH_LEGACY,
        rules.torch,
        may_resume=True,
        reader="formats.file_detect:read_torch_legacy",
        suffixes=_TORCH,
        split_refusal="a legacy (pre-1.6) torch file is not split (re-save it with a "
        "current torch: its storages are then a zip's members, copied as they are)",
        compress_refusal=_TORCH_COMPRESS,
        load=_TORCH_LOAD,
    ),
    Family(
        Format.SAFETENSORS,
        rules.safetensors,
        reader="formats.file_detect:read_safetensors",
        suffixes=(".safetensors", ".bin"),
        split_refusal="a safetensors file holds weights only: nothing to split",
        compress_refusal=_TORCH_COMPRESS,
        load=_TORCH_LOAD,
    ),
    # TensorFlow: found by discovery's own rules (a prefix and its shards, saved_model.pb)
    Family(Format.TF_CHECKPOINT, rules.tf_checkpoint, may_resume=True),
    Family(Format.SAVED_MODEL, rules.saved_model, folder=True),
    # folder checkpoints (fs.folder_layouts), each read whole by its reader
    Family(
        Format.HF_FOLDER,
        rules.hf_folder,
        may_resume=True,
        reader="formats.hf_folder:read",
        layout="fs.folder_layouts:HF_FOLDER_LAYOUT",
        folder=True,
        splitter="transforms.hf_split",
        compress_refusal="a Hugging Face folder's files have no lossless compressed form "
        "that from_pretrained still opens",
        load=_TORCH_LOAD,
    ),
    Family(
        Format.ORBAX,
        rules.orbax,
        may_resume=True,
        reader="formats.folder_saves:read",
        layout="fs.folder_layouts:ORBAX_LAYOUT",
        folder=True,
        completeness=SAVE,
        load=_FOLDER_LOAD,
    ),
    Family(
        Format.TORCH_DCP,
        rules.dcp,
        may_resume=True,
        reader="formats.folder_saves:read",
        layout="fs.folder_layouts:DCP_LAYOUT",
        folder=True,
        completeness=SAVE,
        load=_FOLDER_LOAD,
    ),
):
    register(_row)
