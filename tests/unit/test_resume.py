"""`core.resume.resumability`: which checkpoints training can resume from, and the reason said,
for every format, kind, writing Keras version and optimizer state."""

from __future__ import annotations

import pytest

from ckpt_daemon.core.model import Format
from ckpt_daemon.core.resume import (
    LEGACY_H5_RESUMES_IN,
    may_resume,
    optimizer_config_lost,
    resumability,
)

F = Format
# (format, kind, optimizer_bytes, keras_version, resumable, a word of the reason)
TABLE = [
    (F.KERAS_ZIP, "full", 1828, "3.15.1", True, "load_model"),
    (F.KERAS_ZIP, "full", 1828, None, True, "load_model"),
    (F.KERAS_ZIP, "full", 0, "3.15.1", False, "no optimizer state"),
    (F.KERAS_ZIP, "full", None, "3.15.1", False, "no optimizer state"),
    (F.KERAS_LEGACY_H5, "full", 1824, "2.21.0", True, "tf_keras"),
    (F.KERAS_LEGACY_H5, "full", 1824, "2.15.0", True, "tf_keras"),
    (F.KERAS_LEGACY_H5, "full", 1828, "3.15.1", False, "drops its optimizer slots"),
    (F.KERAS_LEGACY_H5, "full", 1828, "3.0.0", False, "drops its optimizer slots"),
    (F.KERAS_LEGACY_H5, "full", 1828, "10.1", False, "drops its optimizer slots"),
    (F.KERAS_LEGACY_H5, "full", 1828, None, False, "unknown Keras version"),
    (F.KERAS_LEGACY_H5, "full", 1828, "tf.keras", False, "unknown Keras version"),
    (F.KERAS_LEGACY_H5, "full", 1828, "", False, "unknown Keras version"),
    (F.KERAS_LEGACY_H5, "full", 1828, "٣.1", False, "unknown Keras version"),  # not ASCII
    (F.KERAS_LEGACY_H5, "full", 0, "2.21.0", False, "no optimizer state"),
    (F.KERAS_LEGACY_H5, "weights", 1824, "2.21.0", False, "weights only"),
    (F.KERAS_LEGACY_WEIGHTS_H5, "weights", 0, "2.21.0", False, "weights only"),
    (F.KERAS_LEGACY_WEIGHTS_H5, "weights", 1000, "2.21.0", False, "weights only"),
    (F.KERAS_WEIGHTS_H5, "weights", 1828, None, False, "load_weights"),
    (F.KERAS_WEIGHTS_H5, "weights", 0, None, False, "weights only"),
    (F.TF_CHECKPOINT, "weights", 1828, None, True, "restore(prefix)"),
    (F.TF_CHECKPOINT, "full", 1828, None, True, "restore(prefix)"),
    (F.TF_CHECKPOINT, "weights", 0, None, False, "no optimizer state"),
    (F.SAVED_MODEL, "full", 1828, None, False, "SavedModel"),
    (F.SAVED_MODEL, "full", 0, "2.21.0", False, "SavedModel"),
    (F.TORCH_ZIP, "full", 184, None, True, "load_state_dict"),
    (F.TORCH_ZIP, "weights", 184, None, False, "without a scheduler or epoch/step"),
    (F.TORCH_ZIP, "weights", 0, None, False, "no optimizer state"),
    (F.TORCH_LEGACY, "full", 184, None, True, "load_state_dict"),
    (F.TORCH_LEGACY, "weights", None, None, False, "no optimizer state"),
    (F.LIGHTNING, "full", 184, None, True, "ckpt_path"),
    (F.LIGHTNING, "weights", 0, None, False, "no optimizer state"),
    (F.SAFETENSORS, "weights", 0, None, False, "weights only"),
    (F.ORBAX, "full", 5000, "3.15.1", True, "Orbax"),
    (F.ORBAX, "weights", 900, None, True, "Orbax"),
    (F.ORBAX, "weights", 0, None, False, "no optimizer state"),
    (F.TORCH_DCP, "weights", 552, None, True, "dcp.load"),
    (F.TORCH_DCP, "weights", 0, None, False, "no optimizer state"),
    (F.HF_FOLDER, "full", 31092, None, True, "resume_from_checkpoint"),
    (F.HF_FOLDER, "weights", 31092, None, False, "scheduler.pt and trainer_state.json"),
    (F.HF_FOLDER, "weights", 0, None, False, "no optimizer state"),
    (F.TORCH_RANKS, "weights", 5948, None, True, "per-rank model and optimizer"),
    (F.TORCH_RANKS, "weights", 0, None, False, "no optimizer state"),
    (F.MEGATRON_DIST, "weights", 2954, None, True, "--load the parent"),
    (F.MEGATRON_LEGACY, "full", 2954, None, True, "--load the parent"),
    (F.MEGATRON_LEGACY, "full", 0, None, False, "no optimizer state"),
    (F.DEEPSPEED_ZERO, "full", 14526, None, True, "load_checkpoint"),
    (F.DEEPSPEED_ZERO, "weights", 0, None, False, "no optimizer state"),
    (None, None, 1828, None, False, "format unknown"),
]


@pytest.mark.parametrize(("fmt", "kind", "optimizer", "version", "resumable", "word"), TABLE)
def test_resumability_table(
    fmt: Format | None,
    kind: str | None,
    optimizer: int | None,
    version: str | None,
    resumable: bool,
    word: str,
) -> None:
    verdict = resumability(fmt, kind, optimizer, version)
    assert verdict.resumable is resumable
    assert word in verdict.reason


def test_every_format_is_in_the_table() -> None:
    assert {row[0] for row in TABLE} >= set(Format)


def test_the_catalog_prefilter_keeps_every_resumable_row() -> None:
    """The readers ask SQL only for may_resume() formats with optimizer_bytes > 0: a row outside
    that could never be resumable, so the filter loses nothing."""
    for fmt, kind, optimizer, version, resumable, _word in TABLE:
        if resumable:
            assert fmt in may_resume() and optimizer and optimizer > 0
        if resumable and fmt == Format.KERAS_LEGACY_H5:  # SQL: kind full, keras_version 'N.%'
            assert kind == "full" and version and version.split(".")[0] in LEGACY_H5_RESUMES_IN
    for fmt in set(Format) - set(may_resume()):
        for kind in ("full", "weights"):
            for version in ("2.21.0", "3.15.1", None):
                assert not resumability(fmt, kind, 10**6, version).resumable


# Issue 21: a `.keras` saved after an `.h5` save in the same process holds the optimizer state
# but its compile config names no optimizer; load_model then resumes with RMSprop at iteration 0.
# (details as the catalog records them, resumable, a word of the reason)
LOST = [
    ({"optimizer_config": None, "optimizer_variables": 13}, False, "RMSprop at iteration 0"),
    ({"optimizer_config": {}, "optimizer_variables": 13}, False, "lost the optimizer"),
    ({"optimizer_config": {"learning_rate": 0.01}}, True, "load_model"),
    ({"layers": []}, True, "load_model"),  # not recorded: nothing says it was lost
    ({}, True, "load_model"),
    (None, True, "load_model"),
]


@pytest.mark.parametrize(("details", "resumable", "word"), LOST)
def test_a_keras_archive_whose_compile_config_lost_its_optimizer_does_not_resume(
    details: dict | None, resumable: bool, word: str
) -> None:
    lost = optimizer_config_lost(Format.KERAS_ZIP, details)
    verdict = resumability(Format.KERAS_ZIP, "full", 3700, "3.15.1", optimizer_config_lost=lost)
    assert verdict.resumable is resumable and word in verdict.reason


@pytest.mark.parametrize("fmt", sorted(set(Format) - {Format.KERAS_ZIP}, key=str))
def test_only_a_keras_archive_can_lose_its_optimizer_config(fmt: Format) -> None:
    """Other formats keep their optimizer config elsewhere (or have none): the fact never
    changes their verdict."""
    assert not optimizer_config_lost(fmt, {"optimizer_config": None})
    for kind in ("full", "weights"):
        for version in ("2.21.0", "3.15.1"):
            plain = resumability(fmt, kind, 3700, version)
            assert resumability(fmt, kind, 3700, version, optimizer_config_lost=True) == plain


def test_without_optimizer_state_the_lost_config_is_not_the_reason() -> None:
    verdict = resumability(Format.KERAS_ZIP, "full", 0, "3.15.1", optimizer_config_lost=True)
    assert not verdict.resumable and "no optimizer state" in verdict.reason
