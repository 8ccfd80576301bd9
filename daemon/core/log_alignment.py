"""Which checkpoint each row of a run's logs belongs to, decided from the checkpoints (pure).

A log with an `epoch` column counts from 0 (Keras's CSVLogger, a loop's `csv.writer`, the step
of Keras's TensorBoard `epoch_*` tags); `formats.run_logs` keys its rows by that number + 1,
the Keras rule, since Keras names its files by the number of epochs done (`{epoch}` is 1 after
the first). A PyTorch loop saves `{"epoch": epoch}` (and names `ckpt_epoch{epoch:03d}.pt`) with
the same 0-based index as its log, and Lightning stores its 0-based `epoch`: there, row `r` is the
checkpoint of epoch `r`, not `r + 1`. A plain `torch.utils.tensorboard.SummaryWriter` stream
(`Loss/train`, `Accuracy/val`, ...) is keyed by whatever step the user passed: the epoch or the
global step.

The checkpoints' epochs are the truth, so the run decides (`align`), strongest evidence first:
1. the values: a metric a checkpoint records of itself (a torch dict's `val_loss`, a sidecar)
   equal to a log's value one way and not the other;
2. the formats: torch-family files (torch.save, Lightning, DCP, safetensors) count from 0,
   Keras files by epochs done; a run with a file of epoch 0 that is not Keras's counts from 0;
3. otherwise the Keras rule (what every run got before).
A plain TensorBoard stream is read by epoch when its steps meet more of the checkpoints' epochs
than of their steps. A checkpoint's own value that a log contradicts at the chosen row is a
note (`core.derive` keeps the checkpoint's value), never a silent shift.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import families

KERAS_RULE = 1  # offset: 0-based log row r is the checkpoint of epoch r + 1


@dataclass(frozen=True)
class Stream:
    """One log whose rows may be read more than one way: `epochs` keyed by the 0-based epoch
    it wrote (`rows`), or a plain TensorBoard stream (`steps`) keyed by the step it was given."""

    source: str
    kind: str  # "epochs" | "steps"
    rows: Mapping[int, Mapping[str, float]]


@dataclass(frozen=True)
class Evidence:
    """A checkpoint of the run and what it says of itself."""

    name: str
    format: str
    epoch: int | None  # its own (name, sidecar, the epoch it records)
    step: int | None  # its global step (recorded, or the optimizer's iterations)
    values: Mapping[str, float]  # metrics it records of itself


@dataclass(frozen=True)
class Alignment:
    offset: int  # a 0-based log row r (or a step-stream row read by epoch) is epoch r + offset
    epoch_streams: tuple[str, ...]  # the plain TensorBoard streams read by epoch
    reason: str
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "epoch_streams": list(self.epoch_streams),
            "why": self.reason,
        }

    @staticmethod
    def of_json(obj: object) -> Alignment:
        """An alignment stored in a run's details; the Keras rule where none was stored."""
        if not isinstance(obj, dict) or obj.get("offset") not in (0, 1):
            return Alignment(KERAS_RULE, (), "")
        streams = obj.get("epoch_streams")
        names = tuple(s for s in streams if isinstance(s, str)) if isinstance(streams, list) else ()
        return Alignment(int(obj["offset"]), names, str(obj.get("why") or ""))


def align(streams: Sequence[Stream], members: Sequence[Evidence]) -> Alignment:
    """How the run's logs line up with `members` (see the module's text)."""
    epochs = {m.epoch for m in members if m.epoch is not None}
    steps = {m.step for m in members if m.step is not None}
    by_epoch = [s for s in streams if s.kind == "epochs"]
    by_step = [s.source for s in streams if s.kind == "steps" and _reads_epochs(s, epochs, steps)]
    readable = [*by_epoch, *(s for s in streams if s.source in by_step)]
    scores = {offset: _score(readable, members, offset) for offset in (0, 1)}
    (agree0, against0), (agree1, against1) = scores[0][:2], scores[1][:2]
    offset, reason = _decide(members, agree0, against0, agree1, against1, scores)
    notes = tuple(scores[offset][2][:5])
    return Alignment(offset, tuple(by_step), reason, notes)


def _decide(
    members: Sequence[Evidence],
    agree0: int,
    against0: int,
    agree1: int,
    against1: int,
    scores: Mapping[int, tuple[int, int, list[str], str]],
) -> tuple[int, str]:
    if agree0 > agree1 and against0 <= against1:
        return 0, f"values agree with the logs' epoch counted from 0 ({scores[0][3]})"
    if agree1 > agree0 and against1 <= against0:
        return 1, f"values agree with the logs' epoch + 1 ({scores[1][3]})"
    # who wrote the files (their format rows): Keras counts epochs from 1, a torch loop from 0
    writers = {m.format: getattr(families.row(m.format), "writer", None) for m in members}
    keras = "keras" in writers.values()
    zero_based = sorted(str(f) for f, w in writers.items() if w == "torch")
    if zero_based and not keras:
        return 0, f"{zero_based[0]} files count epochs from 0, as the logs do"
    if not keras and any(m.epoch == 0 for m in members):
        return 0, "a checkpoint of epoch 0: the run counts epochs from 0, as the logs do"
    return KERAS_RULE, ""


def _reads_epochs(stream: Stream, epochs: set[int], steps: set[int]) -> bool:
    """Whether a plain TensorBoard stream's steps are epochs: they meet more of the checkpoints'
    epochs (either way of counting) than of their global steps, and do not run far past the
    last epoch (a loop logging every batch by global step, with no step in its files, meets
    the small epoch numbers too)."""
    keys = set(stream.rows)
    if not keys or not epochs or max(keys) > 2 * max(epochs) + 2:
        return False
    as_epochs = max(len(epochs & keys), len(epochs & {k + 1 for k in keys}))
    return as_epochs > len(steps & keys)


def _score(
    streams: Sequence[Stream], members: Sequence[Evidence], offset: int
) -> tuple[int, int, list[str], str]:
    """(values that agree, values that disagree, a note per disagreement, an example agreement)
    when row r is read as the checkpoint of epoch r + offset."""
    agree, against, notes, example = 0, 0, [], ""
    for m in members:
        if m.epoch is None or not m.values:
            continue
        for s in streams:
            row = s.rows.get(m.epoch - offset, {})
            for name, value in m.values.items():
                logged = row.get(name)
                if logged is None:
                    continue
                if _same(value, logged):
                    agree += 1
                    example = example or f"{name} {value:.6g} in {m.name} and {s.source}"
                else:
                    against += 1
                    notes.append(
                        f"{s.source} has {name} {logged:.6g} at epoch {m.epoch}, {m.name} "
                        f"records {value:.6g}: the checkpoint's value is used"
                    )
    return agree, against, notes, example


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=2e-7, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
