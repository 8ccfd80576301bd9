"""DeepSpeed's classes in its checkpoint pickles, as inert records of `pickle_safe` (no import).

A ZeRO checkpoint's `*_optim_states.pt` names four globals besides torch's: the stage enum
(`ZeroStageEnum(2)`, by REDUCE), the loss scaler (NEWOBJ then BUILD with its `__dict__`), the
`fragment_address(numel, start)` dataclass of ZeRO-2's `param_slice_mappings`, and, in ZeRO-3,
each flat fp32 group as `torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2, Tensor, args,
{'ds_id': ...})` (a tensor with a Python attribute). Here each becomes a record of plain values:
the stage an int, the scaler and the address their scalar fields, the flat group the tensor
record our own rebuilder makes of `args` (only when the rebuilder named is ours); anything else
stays an `Opaque` placeholder. Nothing of DeepSpeed or torch is imported or run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ZeroStage(int):
    """`deepspeed.runtime.zero.config.ZeroStageEnum(n)`: the stage, an int."""


def _zero_stage(value: Any = 0, *_: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return ZeroStage(value)
    return None


class _Fields:
    """A DeepSpeed object built by NEWOBJ + BUILD: its scalar fields only (numbers, text)."""

    global_name = "?"

    def __new__(cls, *_args: Any, **_kwargs: Any) -> _Fields:
        obj = super().__new__(cls)
        obj.fields = {}
        return obj

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    fields: dict[str, int | float | str | bool | None]

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            for key, value in list(state.items())[:64]:
                if isinstance(key, str) and (value is None or isinstance(value, int | float | str)):
                    self.fields[key] = value


class FragmentAddress(_Fields):
    """`deepspeed.utils.tensor_fragment.fragment_address`: {numel, start}."""

    global_name = "deepspeed.utils.tensor_fragment.fragment_address"


class LossScaler(_Fields):
    """`deepspeed.runtime.fp16.loss_scaler.LossScaler` / `DynamicLossScaler`: cur_scale, ..."""

    global_name = "deepspeed.runtime.fp16.loss_scaler.LossScaler"


class _TensorType:
    """`torch.Tensor` named as the type `_rebuild_from_type_v2` rebuilds into."""


def records(
    rebuild_tensor: Callable[..., Any], otherwise: Callable[..., Any] | None = None
) -> dict[tuple[str, str], Any]:
    """The (module, name) -> record table `pickle_safe` adds to its own; `rebuild_tensor` is
    its tensor rebuilder (the only function `_rebuild_from_type_v2` may hand the args to);
    `otherwise` makes the inert record of any other call (a DTensor's wrapper subclass keeps
    its args and state there: formats.rank_files reads them)."""

    def rebuild_from_type(
        func: Any = None, new_type: Any = None, args: Any = (), *rest: Any
    ) -> Any:
        if func is rebuild_tensor and new_type is _TensorType and isinstance(args, tuple):
            return rebuild_tensor(*args)
        return otherwise(func, new_type, args, *rest) if otherwise is not None else None

    return {
        ("deepspeed.runtime.zero.config", "ZeroStageEnum"): _zero_stage,
        ("deepspeed.utils.tensor_fragment", "fragment_address"): FragmentAddress,
        ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"): LossScaler,
        ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"): LossScaler,
        ("torch._tensor", "_rebuild_from_type_v2"): rebuild_from_type,
        ("torch", "Tensor"): _TensorType,
    }
