"""Second files of a kept best (pure): a checkpoint no retention rule keeps that is the same
training moment and value as one a keep_best rule keeps (`ckpt_epoch002.pt` beside the `best.pt`
it was saved with). It goes, since the best stays in its twin, but its reason says so, never
"matched no keep rule" of the best."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .retention_rows import Item


def seconds_of_the_best(
    ok: Sequence[Item], tags: Mapping[int, Sequence[tuple[int, str]]], metrics: Sequence[str]
) -> dict[int, str]:
    """{id: why it goes} for the untagged items of `ok` that are twins of an item kept as
    `best METRIC #k` for one of `metrics`."""
    seconds: dict[int, str] = {}
    for metric in metrics:
        kept = [i for i in ok if any(r.startswith(f"best {metric} #") for _, r in tags[i.id])]
        for item in (i for i in ok if not tags[i.id] and i.epoch is not None):
            twin = next((k for k in kept if _twins(item, k, metric)), None)
            if twin is not None:
                name = twin.path.rsplit("/", 1)[-1]
                seconds[item.id] = f"the same moment and {metric} as {name}, kept as the best"
    return seconds


def _twins(a: Item, b: Item, metric: str) -> bool:
    return (a.epoch, a.step, a.metrics.get(metric)) == (b.epoch, b.step, b.metrics.get(metric))
