"""Can training resume from a checkpoint? One answer with its reason, from catalog facts alone.

`ckpt latest --resumable` filters by it and prints its reason (`resume_reason`); `ckpt describe`
and the model card say the same. Each format's rule is its row's (`core.families`, the rules
themselves and the facts behind them in `core.resume_rules`); every answer to "resumable"
(`latest --resumable` and its `--json`, the model card, `describe`) is this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import families
from .model import Checkpoint, Format
from .resume_rules import LEGACY_H5_RESUMES_IN, Resumability, ResumeFacts

__all__ = ["LEGACY_H5_RESUMES_IN", "Resumability", "may_resume", "resumability"]


def may_resume() -> tuple[Format, ...]:
    """The formats that may be resumable at all (the catalog queries pre-filter on them and on
    optimizer_bytes > 0; `resumability` is the judge of every row that passes)."""
    return tuple(r.format for r in families.rows() if r.may_resume)


def resumability(
    format: Format | None,
    kind: str | None,
    optimizer_bytes: int | None,
    keras_version: str | None,
    *,
    optimizer_config_lost: bool = False,
) -> Resumability:
    """Whether training can resume from a checkpoint of this `format` and `kind`, with
    `optimizer_bytes` of optimizer state, written by Keras `keras_version` (None: unknown);
    `optimizer_config_lost`: its compile config names no optimizer (`optimizer_config_lost()`)."""
    row = families.row(format)
    if format is None or row is None:
        return Resumability(False, "format unknown")
    facts = ResumeFacts(row.format, kind, optimizer_bytes, keras_version, optimizer_config_lost)
    return row.resume(facts)


def may_resume_listed(c: Checkpoint) -> bool:
    """Training may resume from the listed row `c` (`resumability`, as `ckpt latest --resumable`
    judges it). A legacy `.h5` with optimizer state counts (the listing does not carry the Keras
    version that decides it): protecting one too many is the safe side."""
    legacy = c.format == Format.KERAS_LEGACY_H5 and (c.optimizer_bytes or 0) > 0
    return legacy or resumability(c.format, c.kind, c.optimizer_bytes, None).resumable


def optimizer_config_lost(format: Format | None, details: Mapping[str, Any] | None) -> bool:
    """Whether a Keras archive's compile config names no optimizer, from the catalog's `details`
    of it (or `show --json`): its `optimizer_config` recorded, and empty. False when it was not
    recorded (nothing says it was lost). `resumability` judges it only beside optimizer state."""
    if format != Format.KERAS_ZIP or not details or "optimizer_config" not in details:
        return False
    return not details["optimizer_config"]
