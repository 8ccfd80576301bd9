"""Do the pieces of a sharded tensor tile it exactly? Each inside the tensor, no two sharing an
element, every element covered: a rank file copied over another, or a chunk recorded twice,
would otherwise pass for a complete save and consolidate into a wrong model. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import CorruptCheckpoint

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes) in the global tensor


def check_tiles(name: str, shape: tuple[int, ...], boxes: Sequence[Box]) -> None:
    """CorruptCheckpoint naming the first piece that does not fit, overlaps or is missing."""
    total = 0
    for offsets, sizes in boxes:
        inside = len(offsets) == len(shape) == len(sizes) and all(
            o >= 0 and o + s <= d for o, s, d in zip(offsets, sizes, shape, strict=True)
        )
        if not inside:
            raise CorruptCheckpoint(f"{name}: a piece at {offsets} lies outside {shape}")
        total += math.prod(sizes)
    filled = [b for b in boxes if math.prod(b[1])]
    for i, (a_at, a_size) in enumerate(filled):
        for b_at, b_size in filled[i + 1 :]:
            sides = zip(a_at, a_size, b_at, b_size, strict=True)
            if all(ao < bo + bs and bo < ao + asz for ao, asz, bo, bs in sides):
                raise CorruptCheckpoint(f"{name}: pieces at {a_at} and {b_at} overlap")
    if total != math.prod(shape):
        raise CorruptCheckpoint(f"{name}: its pieces hold {total} of {math.prod(shape)} elements")
