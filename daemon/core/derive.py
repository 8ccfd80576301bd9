"""Epoch, step and metrics of every checkpoint of one run, from all the run's evidence at once.

Pure: the caller (usecases.derivation) gathers what the files say; this decides. Per checkpoint,
highest precedence first:

- epoch/step: its `<checkpoint>.json` sidecar; its file name (read with the run's naming scheme);
  the same content (hash) as another checkpoint of the run whose epoch is known; its optimizer
  iteration count divided by the run's steps per epoch, when the run's evidence leaves exactly
  one possible steps-per-epoch value. No evidence, no epoch: nothing here guesses.
- metrics: the sidecar, then the run's logs at that epoch (or step), then the values printed in
  the file name (rounded; a disagreement with a log is noted).

Steps per epoch: every (iteration count, possible epochs) pair the run offers narrows the set of
values. A name's epoch is an exact pair; a generation the indexer saw with the run's epoch log at
k epochs is in epochs k..k+1 if the log was last written before the checkpoint (Keras writes the
CSV row and the checkpoint at the same epoch end, in the callbacks' order), else in 1..k.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from .model import MetricValue
from .naming import NameFields, is_unnamed
from .save_counters import epochs_from_step_numbers, step_differs_note
from .training_metrics import disagrees, to_float
from .units import counted

MID_EPOCH = "batch"


@dataclass(frozen=True)
class Sighting:
    """One generation of a checkpoint file, as the indexer saw it when it read it."""

    generation: int
    hash: str | None
    iterations: int | None
    mtime_ns: int
    log_epochs: int | None = None  # the run's highest logged epoch then; None: no epoch log
    log_before: bool = False  # that log had not been written since the file's mtime


@dataclass(frozen=True)
class Member:
    """A checkpoint of the run and what its own name and sidecar say."""

    id: int
    name: str
    hash: str | None
    iterations: int | None
    mtime_ns: int
    name_ints: Mapping[str, int] = field(default_factory=dict)
    name_metrics: Mapping[str, str] = field(default_factory=dict)  # metric -> text as written
    name_scheme: str | None = None  # the template the name was read with
    sidecar_ints: Mapping[str, int] = field(default_factory=dict)
    sidecar_values: Mapping[str, float] = field(default_factory=dict)
    sidecar_label: str = "sidecar"
    history: tuple[Sighting, ...] = ()  # earlier generations, oldest first


def member(
    ckpt_id: int,
    name: str,
    fields: NameFields,
    sidecar: tuple[Mapping[str, int], Mapping[str, float], str] = ({}, {}, "sidecar"),
    *,
    digest: str | None = None,
    iterations: int | None = None,
    mtime_ns: int = 0,
    history: tuple[Sighting, ...] = (),
) -> Member:
    """A Member from what its name and its sidecar (ints, values, label) say."""
    return Member(
        id=ckpt_id,
        name=name,
        hash=digest,
        iterations=iterations,
        mtime_ns=mtime_ns,
        name_ints=fields.ints,
        # A value in the name that no label or log names is not a metric anyone can query.
        name_metrics={k: v for k, v in fields.metrics.items() if not is_unnamed(k)},
        name_scheme=fields.template,
        sidecar_ints=sidecar[0],
        sidecar_values=sidecar[1],
        sidecar_label=sidecar[2],
        history=history,
    )


@dataclass(frozen=True)
class Logged:
    """The run's metrics logs, merged nearest-first (formats.run_logs)."""

    by_epoch: Mapping[int, Mapping[str, MetricValue]] = field(default_factory=dict)
    by_step: Mapping[int, Mapping[str, MetricValue]] = field(default_factory=dict)
    epochs: int = 0  # the highest logged epoch (0: no epoch log)
    mtime_ns: int = 0  # the last write of an epoch log
    # The number of the first epoch in the run's checkpoints: 1 as Keras names files (epochs
    # done), 0 as a PyTorch loop or Lightning counts (core.log_alignment): epochs done at a
    # checkpoint of epoch E is E + 1 - first_epoch, what its optimizer iterations count.
    first_epoch: int = 1


@dataclass(frozen=True)
class Derived:
    epoch: int | None
    step: int | None
    metrics: tuple[MetricValue, ...]
    epoch_source: str | None
    notes: tuple[str, ...]
    history_epochs: tuple[int | None, ...] = ()  # the epoch of each earlier generation


@dataclass(frozen=True)
class RunDerivation:
    members: dict[int, Derived]
    steps_per_epoch: int | None
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class _Pair:
    iterations: int
    low: int
    high: int
    what: str


def derive_run(members: Sequence[Member], logged: Logged) -> RunDerivation:
    own = {m.id: _own_fields(m) for m in members}
    named_epochs = epochs_from_step_numbers(members, own, MID_EPOCH)
    logged_steps = epochs_of_steps(logged)
    pairs = list(_pairs(members, own, logged))
    pairs += [
        _Pair(step, e, e, f"log: epoch {e} ended at step {step}")
        for step, e in logged_steps.items()
    ]
    spe, evidence = steps_per_epoch(pairs)
    evidence = [*named_epochs, *evidence]
    reset = optimizer_reset(members)
    if reset is not None:
        spe, evidence = None, [reset, *evidence]
    by_hash: dict[str, tuple[int, str]] = {}
    anchors: list[tuple[int, int]] = []  # (mtime, epoch) of files that tell their own epoch
    for m in sorted(members, key=lambda m: m.name):
        ints = own[m.id][0]
        if "epoch" in ints and MID_EPOCH not in ints:
            anchors.append((m.mtime_ns, ints["epoch"]))
            if m.hash:
                by_hash.setdefault(m.hash, (ints["epoch"], m.name))
    known = _Known(by_hash, logged_steps, spe, Timeline.of(anchors), logged.first_epoch)
    out = {m.id: _derive(m, own[m.id], known, logged) for m in members}
    return RunDerivation(out, spe, tuple(evidence))


@dataclass(frozen=True)
class _Known:
    """What the whole run tells about a checkpoint that does not tell its own epoch."""

    by_hash: Mapping[str, tuple[int, str]]  # content hash -> (epoch, the file that names it)
    logged_steps: Mapping[int, int]  # global step -> the epoch the log says ended there
    spe: int | None
    anchors: Timeline  # the files that name their epochs, by mtime
    first_epoch: int = 1  # Logged.first_epoch


def optimizer_reset(members: Sequence[Member]) -> str | None:
    """Why iteration counts cannot give epochs in this run, if they went down over time: a
    later file (or generation) with fewer iterations than an earlier one means the optimizer
    was created anew (a second `compile()`, a resume from weights only)."""
    seen = [(m.mtime_ns, m.iterations, m.name) for m in members if m.iterations]
    seen += [
        (s.mtime_ns, s.iterations, f"{m.name} generation {s.generation}")
        for m in members
        for s in m.history
        if s.iterations
    ]
    seen.sort(key=lambda t: t[0])
    most: tuple[int, int, str] | None = None
    for mtime, iterations, what in seen:
        assert iterations is not None
        if most is not None and iterations < most[1] and mtime > most[0]:
            return (
                f"optimizer iterations went down ({most[1]} in {most[2]}, then {iterations} in "
                f"{what}): the optimizer was created anew; no epoch from iterations"
            )
        if most is None or iterations >= most[1]:
            most = (mtime, iterations, what)
    return None


@dataclass(frozen=True)
class Timeline:
    """Files that name their epochs, by mtime, with the running maximum of their epochs from the
    oldest and the running minimum from the newest: `fits_in_time` in O(log n) per file."""

    times: tuple[int, ...]
    epochs: tuple[int, ...]
    max_upto: tuple[int, ...]  # max epoch of anchors[0..i]
    min_from: tuple[int, ...]  # min epoch of anchors[i..]

    @staticmethod
    def of(anchors: Sequence[tuple[int, int]]) -> Timeline:
        ordered = sorted(anchors)
        times = tuple(t for t, _e in ordered)
        epochs = tuple(e for _t, e in ordered)
        max_upto = tuple(accumulate(epochs, max))
        min_from = tuple(reversed(tuple(accumulate(reversed(epochs), min))))
        return Timeline(times, epochs, max_upto, min_from)


def fits_in_time(epoch: int, mtime_ns: int, line: Timeline) -> bool:
    """Whether an epoch derived from iterations agrees with when the file was written, given
    files that name their epochs: no later than a file written after it, no earlier than one
    written before it, and beyond the newest one about as far as their pace says (an optimizer
    created anew after the last named file shows as an epoch far too low)."""
    n = len(line.times)
    before = bisect_left(line.times, mtime_ns)  # anchors[:before] were written earlier
    after = bisect_right(line.times, mtime_ns)  # anchors[after:] were written later
    if (before and epoch < line.max_upto[before - 1]) or (
        after < n and epoch > line.min_from[after]
    ):
        return False
    if after < n or n < 2:
        return True
    t0, e0, t1, e1 = line.times[0], line.epochs[0], line.times[-1], line.epochs[-1]
    if t1 <= t0 or e1 <= e0:
        return True  # no pace to judge by (files copied without their mtimes)
    expected = e1 + (mtime_ns - t1) * (e1 - e0) / (t1 - t0)
    return abs(epoch - expected) <= max(1.5, 0.5 * (expected - e1))


def epochs_of_steps(logged: Logged) -> dict[int, int]:
    """Steps at which the log says an epoch ended: a record logged under a step whose values
    (at least two) are all in one epoch's record, and in no other's. JSON lines with `epoch`
    and `step` log the same record in both tables; Keras's TensorBoard callback writes the
    validation values by epoch (`epoch_loss` in `validation/`) and by the step they were
    computed at (`evaluation_loss_vs_iterations`), beside the train values of the epoch."""
    epochs_with: dict[tuple[str, float], set[int]] = {}
    for epoch, row in logged.by_epoch.items():
        for k, v in row.items():
            epochs_with.setdefault((k, v.value), set()).add(epoch)
    out: dict[int, int] = {}
    for step, row in logged.by_step.items():
        if len(row) < 2:  # one value alike (rounded logs) is chance; a whole record is not
            continue
        found = set.intersection(*(epochs_with.get((k, v.value), set()) for k, v in row.items()))
        if found and len(found) == 1:  # the same values at two epochs: unsure
            out[step] = found.pop()
    return out


def _own_fields(m: Member) -> tuple[dict[str, int], str | None]:
    """What the checkpoint says of itself: sidecar ints over name ints, and where from."""
    ints = dict(m.name_ints)
    source: str | None = None
    if ints:
        source = f"file name ({m.name_scheme})" if m.name_scheme else "file name"
    for key, value in m.sidecar_ints.items():
        ints[key] = value
        source = m.sidecar_label
    return ints, source


def _overrides(m: Member) -> list[str]:
    return [
        f"sidecar {key} {value} overrides filename {key} {m.name_ints[key]}"
        for key, value in m.sidecar_ints.items()
        if key in m.name_ints and m.name_ints[key] != value
    ]


def _pairs(
    members: Sequence[Member], own: Mapping[int, tuple[dict[str, int], str | None]], logged: Logged
) -> list[_Pair]:
    pairs: list[_Pair] = []
    for m in members:
        ints = own[m.id][0]
        epoch = ints.get("epoch")
        done = None if epoch is None else epoch + 1 - logged.first_epoch
        if m.iterations and done and done > 0 and MID_EPOCH not in ints:
            pairs.append(_Pair(m.iterations, done, done, f"{m.name}: epoch {epoch}"))
        if MID_EPOCH in ints or ("step" in ints and epoch is None):
            continue  # saved every N steps: maybe mid-epoch, so no epoch bounds from the log
        for s in m.history:
            pair = _log_pair(
                s.iterations, s.log_epochs, s.log_before, f"{m.name} gen {s.generation}"
            )
            pairs += [pair] if pair else []
        if logged.epochs:  # the run's log as it is now
            before = logged.mtime_ns <= m.mtime_ns
            pair = _log_pair(m.iterations, logged.epochs, before, m.name)
            pairs += [pair] if pair else []
    return pairs


def _log_pair(iterations: int | None, epochs: int | None, before: bool, what: str) -> _Pair | None:
    if not iterations or not epochs or epochs < 1:
        return None
    if before:
        return _Pair(iterations, epochs, epochs + 1, f"{what}: saved after log epoch {epochs}")
    return _Pair(iterations, 1, epochs, f"{what}: saved by log epoch {epochs}")


def steps_per_epoch(pairs: Sequence[_Pair]) -> tuple[int | None, list[str]]:
    """The one steps-per-epoch value every pair allows, or None with why."""
    if not pairs:
        return None, []
    exact = [p for p in pairs if p.low == p.high]
    seed = exact[0] if exact else min(pairs, key=lambda p: p.high - p.low)
    candidates = {
        seed.iterations // e for e in range(seed.low, seed.high + 1) if seed.iterations % e == 0
    }
    for p in pairs:
        candidates = {c for c in candidates if _fits(p, c)}
        if not candidates:
            return None, [f"no steps per epoch fits every checkpoint (last: {p.what})"]
    if len(candidates) > 1:
        shown = ", ".join(str(c) for c in sorted(candidates)[:4])
        return None, [f"steps per epoch ambiguous ({shown}): no epoch from iterations"]
    spe = candidates.pop()
    seen = counted(len(pairs), "observation")
    return spe, [f"{counted(spe, 'step')} per epoch fits {seen} ({seed.what})"]


def _fits(p: _Pair, spe: int) -> bool:
    return p.iterations % spe == 0 and p.low <= p.iterations // spe <= p.high


def _derive(
    m: Member, own: tuple[dict[str, int], str | None], known: _Known, logged: Logged
) -> Derived:
    ints, source = dict(own[0]), own[1]
    notes = _overrides(m)
    if "epoch" not in ints:
        epoch, epoch_source = _epoch_from_run(m.hash, m.iterations, m.mtime_ns, m.name, known)
        if epoch is not None:
            ints["epoch"], source = epoch, epoch_source
    if MID_EPOCH in ints and "step" not in ints and m.iterations is not None:
        ints["step"] = m.iterations  # saved every N batches: the global step tells where
    elif "step" in ints and m.iterations is not None and ints["step"] != m.iterations:
        # The global step is the optimizer's count; a name's number that differs from it is a
        # save counter (TF CheckpointManager's `ckpt-3` is the third save, not step 3).
        notes.append(step_differs_note(m.name, ints["step"], m.iterations))
        ints["step"] = m.iterations
    metrics = _metrics(m, ints, logged, notes)
    history = tuple(
        _epoch_from_run(s.hash, s.iterations, s.mtime_ns, m.name, known)[0] for s in m.history
    )
    return Derived(ints.get("epoch"), ints.get("step"), metrics, source, tuple(notes), history)


def _epoch_from_run(
    digest: str | None, iterations: int | None, mtime_ns: int, name: str, known: _Known
) -> tuple[int | None, str | None]:
    twin = known.by_hash.get(digest) if digest else None
    if twin is not None and twin[1] != name:
        return twin[0], f"same content as {twin[1]}"
    if iterations and iterations in known.logged_steps:
        return known.logged_steps[iterations], f"the log's epoch ending at step {iterations}"
    spe = known.spe
    if spe and iterations and iterations % spe == 0:
        epoch = iterations // spe - 1 + known.first_epoch
        if fits_in_time(epoch, mtime_ns, known.anchors):
            return epoch, f"optimizer iterations ({iterations} / {spe} steps per epoch)"
    return None, None


def _metrics(
    m: Member, ints: Mapping[str, int], logged: Logged, notes: list[str]
) -> tuple[MetricValue, ...]:
    merged: dict[str, MetricValue] = {
        k: MetricValue(k, v, m.sidecar_label) for k, v in m.sidecar_values.items()
    }
    epoch, step = ints.get("epoch"), ints.get("step")
    if MID_EPOCH in ints and epoch is not None:
        notes.append(f"mid-epoch checkpoint (batch {ints[MID_EPOCH]}): epoch rows not joined")
        epoch = None
    from_logs = dict(logged.by_epoch.get(epoch, {})) if epoch is not None else {}
    # Step logs are keyed by the global step, which is the optimizer's iteration count: a name's
    # number may be a save counter (TF's `ckpt-3`), so the count wins when the file has one.
    step_key = m.iterations if m.iterations is not None else step
    if step_key is not None and (step is not None or epoch is None) and logged.by_step:
        from_logs = dict(logged.by_step.get(step_key, {})) | from_logs
    for name, value in from_logs.items():
        own = merged.setdefault(name, value)
        both_nan = math.isnan(own.value) and math.isnan(value.value)
        if (
            own is not value
            and not both_nan
            and not math.isclose(own.value, value.value, rel_tol=1e-6)
        ):
            # The file's own value is the truth of its moment; a log that says otherwise at
            # this epoch is said, never taken (nor shifted to another epoch to fit).
            notes.append(
                f"{value.source} {name} {value.value:.6g} at this epoch disagrees with the "
                f"{own.source}'s {own.value:.6g}: the {own.source}'s is used"
            )
    for name, text in m.name_metrics.items():
        best = merged.get(name)
        if best is None:
            merged[name] = MetricValue(name, to_float(text), "filename")
        elif disagrees(text, best.value):
            notes.append(
                f"filename {name} {text.strip()} disagrees with {best.source} {best.value:.10g}"
            )
    return tuple(merged[k] for k in sorted(merged))
