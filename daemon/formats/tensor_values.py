"""What a floating-point tensor's bytes hold, counted from their bit patterns: NaN, +/-Inf,
zeros and huge finite values (|x| > 1e30), one bounded chunk at a time (`count`).

Every float dtype is read as unsigned integers of its width: an IEEE-style value is non-finite
when its exponent bits are all ones (NaN when its mantissa is not zero, else Inf), zero when
all but its sign bit are zero, and, the magnitude bits of positive floats ordering as the values
do, huge when those bits exceed 1e30's. So bfloat16 and float16 need no float type of numpy's
(numpy has no bfloat16), a subnormal counts as the finite number it is, and float8 e4m3fn
(NaN only at S.1111.111, no Inf) and e8m0 (NaN at 0xFF, no zero) follow their own rules.
Integer and bool tensors hold no NaN: they are not counted (`is_float`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HUGE = 1e30  # |x| above this looks uninitialized (torch.empty, a garbage read), not trained


@dataclass(frozen=True)
class _Bits:
    unsigned: type[np.unsignedinteger]
    exponent: int  # the exponent field's mask
    huge: int | None  # magnitude bits of HUGE in this dtype: above it is huge (None: never)
    nan_only: int | None = None  # a dtype whose one non-finite pattern (sign aside) is this


def _huge_bits(dtype: type[np.floating], unsigned: type[np.unsignedinteger], shift: int = 0) -> int:
    """The magnitude bits of the largest value <= HUGE (`shift`: of the top bits alone, for
    bfloat16): any pattern above them is a value > HUGE."""
    wide = np.dtype(unsigned).itemsize * 8
    bits = int(np.array(HUGE, dtype=dtype).view(unsigned)) >> shift
    while float(np.array(bits << shift, dtype=unsigned).view(dtype)) > HUGE:
        bits -= 1  # the cast rounded up past HUGE
    assert bits < 1 << (wide - 1 - shift)
    return bits


FLOAT_BITS: dict[str, _Bits] = {
    "float64": _Bits(np.uint64, 0x7FF0_0000_0000_0000, _huge_bits(np.float64, np.uint64)),
    "float32": _Bits(np.uint32, 0x7F80_0000, _huge_bits(np.float32, np.uint32)),
    # bfloat16 is float32's top half
    "bfloat16": _Bits(np.uint16, 0x7F80, _huge_bits(np.float32, np.uint32, shift=16)),
    "float16": _Bits(np.uint16, 0x7C00, None),  # at most 65504: never huge
    "float8_e5m2": _Bits(np.uint8, 0x7C, None),
    "float8_e4m3fn": _Bits(np.uint8, 0x78, None, nan_only=0x7F),  # no Inf, NaN at S.1111.111
    "float8_e8m0fnu": _Bits(np.uint8, 0xFF, None, nan_only=0xFF),  # no sign, no zero
}
# numpy's names of the same dtypes (h5py datasets), and safetensors' own
ALIASES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
ALIASES |= {"F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu"}
ALIASES |= {"half": "float16", "float": "float32", "double": "float64"}


def canonical(dtype: str) -> str:
    return ALIASES.get(dtype, dtype)


def is_float(dtype: str) -> bool:
    """Whether `count` reads this dtype (torch, numpy or safetensors name)."""
    return canonical(dtype) in FLOAT_BITS


@dataclass
class Counts:
    """One tensor's (or chunk's) tally."""

    elements: int = 0
    nan: int = 0
    inf: int = 0
    zero: int = 0
    huge: int = 0

    def add(self, other: Counts) -> None:
        self.elements += other.elements
        self.nan += other.nan
        self.inf += other.inf
        self.zero += other.zero
        self.huge += other.huge


def count(data: bytes | memoryview | np.ndarray, dtype: str) -> Counts:
    """The tally of `data`: little-endian values of `dtype` (a whole number of them)."""
    bits = FLOAT_BITS[canonical(dtype)]
    if isinstance(data, np.ndarray):
        words = data.reshape(-1).view(bits.unsigned)
    else:
        words = np.frombuffer(data, dtype=np.dtype(bits.unsigned).newbyteorder("<"))
    width = words.dtype.itemsize * 8
    sign = np.array(1 << (width - 1), dtype=words.dtype)
    magnitude = words & ~sign
    n = int(words.size)
    if bits.nan_only == 0xFF:  # e8m0: an exponent alone, unsigned: no zero, NaN at 0xFF
        return Counts(n, int(np.count_nonzero(words == 0xFF)), 0, 0, 0)
    if bits.nan_only is not None:
        nan = int(np.count_nonzero(magnitude == bits.nan_only))
        return Counts(n, nan, 0, int(np.count_nonzero(magnitude == 0)), 0)
    exponent = np.array(bits.exponent, dtype=words.dtype)
    nonfinite = (words & exponent) == exponent
    n_nonfinite = int(np.count_nonzero(nonfinite))
    inf = int(np.count_nonzero(magnitude == exponent)) if n_nonfinite else 0
    zero = int(np.count_nonzero(magnitude == 0))
    huge = 0
    if bits.huge is not None:
        above = magnitude > np.array(bits.huge, dtype=words.dtype)
        huge = int(np.count_nonzero(above & ~nonfinite))
    return Counts(n, n_nonfinite - inf, inf, zero, huge)
