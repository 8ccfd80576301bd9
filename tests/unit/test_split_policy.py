"""Which checkpoints the schedule and retention's demotions split: a row's splitter says which
formats, its `splits` which of their checkpoints (`usecases.artifacts.split_by_policy`)."""

from __future__ import annotations

from ckpt_daemon.core.model import Format
from ckpt_daemon.usecases.artifacts import split_by_policy

from .test_pipeline import checkpoint


def test_a_legacy_megatron_save_is_split_by_policy_only_when_known_to_hold_one_rank() -> None:
    # Several model-parallel ranks: the split would be refused (a layer's cut is Megatron's
    # code), so no demotion plans it and fails on it.
    several = checkpoint(
        format=Format.MEGATRON_LEGACY, optimizer_bytes=10, details={"world_size": 2}
    )
    one = checkpoint(format=Format.MEGATRON_LEGACY, optimizer_bytes=10, details={"world_size": 1})
    unknown = checkpoint(format=Format.MEGATRON_LEGACY, optimizer_bytes=10, details={})
    assert not split_by_policy(several)
    assert split_by_policy(one)
    # A listing's row holds no details: left whole rather than a demotion that may fail.
    assert not split_by_policy(unknown)


def test_a_torch_zip_with_optimizer_state_is_split_one_without_is_not() -> None:
    assert split_by_policy(checkpoint(format=Format.TORCH_ZIP, optimizer_bytes=10))
    assert not split_by_policy(checkpoint(format=Format.TORCH_ZIP, optimizer_bytes=0))
