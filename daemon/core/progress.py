"""How far long work has come: the value a use case hands its caller after each item.

`ckpt verify`, `scan`, `prune`, `split` and `compress` report through a callback taking a
`Progress`; the CLI draws a bar and streams a line per finished item from it, the service
passes no callback. A value, not a printer: nothing below the CLI prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """`item` (a path as text) starts (`outcome` None) or has finished with `outcome` (a short
    word: "ok", "indexed", "trashed", "failed", ...; `detail` says more)."""

    item: str
    done: int  # items finished, this one included once it has an outcome
    total: int | None  # every item of the work; None while unknown (a walk of a tree)
    bytes: int = 0  # bytes of the items finished
    total_bytes: int | None = None
    outcome: str | None = None
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.outcome is not None


OnProgress = Callable[[Progress], None]


class Counter:
    """Builds the `Progress` values of one piece of work and hands each to `on_progress`
    (None: the values are not even built)."""

    def __init__(
        self,
        on_progress: OnProgress | None,
        total: int | None = None,
        total_bytes: int | None = None,
    ) -> None:
        self.on_progress = on_progress
        self.total, self.total_bytes = total, total_bytes
        self.done = self.bytes = 0

    def resize(self, items: int, size: int) -> None:
        """The work planned grew (or shrank, negative) by `items` of `size` bytes in all: a
        plan made again."""
        if self.total is not None:
            self.total += items
        if self.total_bytes is not None:
            self.total_bytes += size

    def start(self, item: str) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(item, self.done, self.total, self.bytes, self.total_bytes))

    def finish(self, item: str, outcome: str, size: int = 0, detail: str = "") -> None:
        self.done += 1
        self.bytes += max(0, size)
        if self.on_progress is not None:
            self.on_progress(
                Progress(item, self.done, self.total, self.bytes, self.total_bytes, outcome, detail)
            )
