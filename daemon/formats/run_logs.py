"""The training logs of one run, wherever they sit (`formats.log_discovery` finds them: the run's
folder, then each folder above it up to the root, nearest first; in a folder other runs share,
only the logs that name the run's branch), read and merged: CSVLogger logs under any name and
JSON logs (recognised by `core.log_sniff`), TensorBoard event files (`formats.tb_events`). A
nearer folder's value wins; within one folder a log naming the run's branch beats a `shared` one
(naming no run: derivation drops it with `RunLogs.without` when it does not cover the run's
epochs), then JSON > CSV > TensorBoard.

Every file is opened through `fs.beneath` (beneath the root, no symlink followed, no FIFO
opened); entries, candidates, bytes per file and per run, and records are bounded; bad bytes
become notes, never exceptions. Stat and small reads only: no HDF5, checkpoints not even statted.

`other_runs`: the run folders the caller knows, as paths (indexed once per call) or as a
`RunIndex` of the root's runs built once for a whole scan (it may hold this run and the folders
above it), which keeps a rescan's cost per run flat in the number of runs.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core import lightning_csv
from ..core.errors import Refused
from ..core.log_alignment import Alignment, Stream
from ..core.log_sniff import SNIFF_BYTES, csv_log_separator, parse_json_log
from ..core.model import MetricValue
from ..core.tb_scalars import Scalar, is_lightning, to_metrics
from ..core.training_metrics import MAX_READ_BYTES, ByKey, parse_csv_log
from ..fs import beneath
from . import csv_logger, tb_events
from .log_discovery import Candidate, candidates, label
from .run_index import RunIndex

MAX_RUN_BYTES = 64 * 2**20  # read per run, all files together
_TIERS = {"json": 0, "csv": 1, "tensorboard": 2}

OtherRuns = Collection[Path] | RunIndex


@dataclass(frozen=True)
class LogFile:
    label: str  # path relative to the root, e.g. "exp1/training.log"
    kind: str  # "csv" | "json" | "tensorboard"
    mtime_ns: int
    epochs: int  # highest 1-based epoch this file has a row for (0: none)
    # In a folder above several runs, naming none: the run's only if it covers the run's epochs.
    shared: bool = False
    logged_epochs: frozenset[int] = frozenset()  # the epochs it has a row for


@dataclass(frozen=True)
class RunLogs:
    by_epoch: Mapping[int, Mapping[str, MetricValue]]  # 1-based epoch -> name -> value
    by_step: Mapping[int, Mapping[str, MetricValue]]
    epoch_times: Mapping[int, float]  # 1-based epoch -> wall time it was logged (TensorBoard)
    files: tuple[LogFile, ...]
    notes: tuple[str, ...]
    layers: tuple[_Layer, ...] = field(default=(), repr=False, compare=False)

    def without(self, labels: Collection[str]) -> RunLogs:
        """These logs without the files labelled `labels` (shared logs found not this run's)."""
        drop = set(labels)
        reader = _Reader(Path("."), notes=list(self.notes))
        reader.layers = [layer for layer in self.layers if layer.label not in drop]
        reader.files = [f for f in self.files if f.label not in drop]
        return reader.merged()

    @property
    def epochs_logged(self) -> int:
        """The highest epoch any one log file has a row for (0: no epoch log)."""
        return max((f.epochs for f in self.files), default=0)

    def values_at(self, epoch: int) -> dict[str, float]:
        return {name: m.value for name, m in self.by_epoch.get(epoch, {}).items()}

    def streams(self) -> list[Stream]:
        """The logs `core.log_alignment` may read more than one way: those with a 0-based
        `epoch` (rows as written), and plain TensorBoard streams (by the step they were given)."""
        out: list[Stream] = []
        for layer in self.layers:
            if layer.from_zero:
                rows = {k - 1: v for k, v in layer.by_epoch.items()}
                out.append(Stream(layer.source, "epochs", rows))
            elif layer.plain_steps:
                out.append(Stream(layer.source, "steps", layer.by_step))
        return out

    def aligned(self, alignment: Alignment) -> RunLogs:
        """These logs with their rows at the checkpoints' epochs (`core.log_alignment`): a
        0-based log's row r at epoch r + offset, a plain TensorBoard stream read by epoch the
        same way. The same object under the Keras rule (what `read_run_logs` keys by)."""
        streams = set(alignment.epoch_streams)
        if alignment.offset == 1 and not streams & {layer.source for layer in self.layers}:
            return self
        reader = _Reader(Path("."), notes=list(self.notes))
        reader.layers = [layer.aligned(alignment.offset, streams) for layer in self.layers]
        reader.files = list(self.files)
        return reader.merged()


@dataclass
class _Layer:
    # (level, shared, tier, rank within them): the merge takes the first; at one level a log
    # naming the run's branch beats one naming none.
    order: tuple[int, int, int, int]
    source: str
    by_epoch: ByKey
    by_step: ByKey
    times: dict[int, float] = field(default_factory=dict)
    label: str = ""  # the file's (for a text log; "" for an event folder)
    from_zero: bool = False  # by_epoch keyed by a 0-based epoch + 1 (the Keras rule)
    plain_steps: bool = False  # a plain TensorBoard stream: by_step keyed by the step given

    def aligned(self, offset: int, epoch_streams: Collection[str]) -> _Layer:
        if self.from_zero:
            shift = offset - 1
            return _Layer(
                self.order,
                self.source,
                {k + shift: v for k, v in self.by_epoch.items()},
                self.by_step,
                {k + shift: t for k, t in self.times.items()},
                self.label,
            )
        if self.plain_steps and self.source in epoch_streams:
            by_epoch = {k + offset: v for k, v in self.by_step.items() if k + offset >= 0}
            return _Layer(self.order, self.source, by_epoch, {}, {}, self.label)
        return self


def read_run_logs(
    run_dir: Path, root: Path, patterns: Sequence[str], other_runs: OtherRuns = ()
) -> RunLogs:
    """Every metric the run's logs hold, by epoch and by step, with their sources. `other_runs`:
    the run folders the caller knows (their logs are never this run's). Raises ValueError when
    `run_dir` is not beneath `root`; never on what the files hold."""
    reader = _Reader(Path(os.path.abspath(root)))
    found = candidates(run_dir, root, patterns, other_runs, reader.notes)
    tb_groups: dict[Path, list[Candidate]] = {}
    for rank, cand in enumerate(found.candidates):
        if cand.kind == "tensorboard":
            tb_groups.setdefault(cand.path.parent, []).append(cand)
        else:
            reader.text_log(cand, rank)
    # The newest session's folder first (`logs/fit/<timestamp>/train`): its values win.
    for rank, folder in enumerate(sorted(tb_groups, reverse=True)):
        reader.event_folder(folder, rank, tb_groups[folder])
    if found.withheld and not reader.layers:  # why a run has no metrics: once, when it matters
        shown = ", ".join(found.withheld[:3]) + (", ..." if len(found.withheld) > 3 else "")
        reader.notes.append(
            f"{shown}: in a folder shared by several runs and named after another run's"
            " folder, not used"
        )
    return reader.merged()


def logs_signature(
    run_dir: Path, root: Path, patterns: Sequence[str], other_runs: OtherRuns = ()
) -> tuple[tuple[str, int, int], ...]:
    """(label, size, mtime_ns) of every file `read_run_logs` would open, from stat alone: when
    it is unchanged between two scans, so are the run's logs."""
    found = candidates(run_dir, root, patterns, other_runs, []).candidates
    return tuple(sorted((c.label, c.size, c.mtime_ns) for c in found))


# --- reading them -------------------------------------------------------------------------------


@dataclass
class _Reader:
    """One run's reading: the budget left, and the layers, files and notes gathered."""

    root: Path
    budget: int = MAX_RUN_BYTES
    layers: list[_Layer] = field(default_factory=list)
    files: list[LogFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text_log(self, cand: Candidate, rank: int) -> None:
        data = self.read(cand)
        try:
            text = None if data is None else data.decode("utf-8-sig")
        except UnicodeDecodeError:
            self.notes += [f"{cand.label}: not UTF-8 text, ignored"] if cand.configured else []
            return
        if text is None:
            return
        kind = "csv" if cand.kind in ("csv", "sniff", csv_logger.KIND) else "json"
        by_step: ByKey = {}
        if cand.kind == csv_logger.KIND:  # Lightning's: sparse rows, 0-based epochs, steps
            by_epoch, by_step = lightning_csv.parse(text)
        elif kind == "csv":
            first = text.split("\n", 1)[0]
            by_epoch = parse_csv_log(text, next((s for s in (",", ";", "\t") if s in first), ","))
        else:
            by_epoch, by_step, problem = parse_json_log(text, lines=cand.kind == "jsonl")
            found = bool(by_epoch or by_step)
            if problem and (cand.configured or found):
                self.notes.append(f"{cand.label}: {problem}" + ("" if found else ", ignored"))
            if not (found or cand.configured):
                return  # some other JSON (a config, a vocabulary): not a log
        order = (cand.level, int(cand.shared), _TIERS[kind], rank)
        from_zero = kind == "csv" and cand.kind != csv_logger.KIND
        self.layers.append(
            _Layer(
                order,
                f"{kind}:{cand.label}",
                by_epoch,
                by_step,
                label=cand.label,
                from_zero=from_zero,
            )
        )
        epochs = max(by_epoch, default=0)
        self.files.append(
            LogFile(cand.label, kind, cand.mtime_ns, epochs, cand.shared, frozenset(by_epoch))
        )

    def event_folder(self, folder: Path, rank: int, group: list[Candidate]) -> None:
        """One layer per event folder: its files in name (= creation time) order, a later
        file's value for the same key winning, as a resumed run writes a new file."""
        scalars: list[Scalar] = []
        for cand in sorted(group, key=lambda c: c.path.name):
            data = self.read(cand)
            if data is None:
                continue
            found = tb_events.decode_events(data, cand.label)
            self.notes += found.notes
            scalars += found.scalars
            epochs = to_metrics(found.scalars, folder.name).epochs
            self.files.append(LogFile(cand.label, "tensorboard", cand.mtime_ns, epochs))
        metrics = to_metrics(scalars, folder.name)
        order = (group[0].level, 0, _TIERS["tensorboard"], rank)
        source = f"tensorboard:{label(folder, self.root)}"
        keras = not is_lightning(scalars) and bool(metrics.by_epoch)  # `epoch_*` tags
        plain = not is_lightning(scalars) and not metrics.by_epoch
        self.layers.append(
            _Layer(
                order,
                source,
                metrics.by_epoch,
                metrics.by_step,
                metrics.epoch_times,
                from_zero=keras,
                plain_steps=plain,
            )
        )

    def read(self, cand: Candidate) -> bytes | None:
        """The file's bytes, bounded: a sniffed file only if its first bytes are a CSV log; an
        event file over the limit up to the limit (its first records)."""
        limit = min(MAX_READ_BYTES, self.budget)
        prefix = cand.kind == "tensorboard"
        if cand.size > limit and not (prefix and limit > 0):
            if cand.kind != "sniff":
                why = (
                    f"larger than {limit} bytes"
                    if limit == MAX_READ_BYTES
                    else "over the run's budget"
                )
                self.notes.append(f"{cand.label}: {why}, ignored")
            return None
        try:
            fd = beneath.open_regular(cand.path, self.root)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(SNIFF_BYTES if cand.kind == "sniff" else limit + 1)
                if cand.kind == "sniff" and csv_log_separator(data, len(data) < SNIFF_BYTES):
                    data += fh.read(limit + 1 - len(data))
                elif cand.kind == "sniff":
                    self.budget -= len(data)
                    return None
        except FileNotFoundError:
            return None  # removed since it was listed
        except Refused as exc:  # a symlink, a FIFO, a symlinked folder: never read
            self.notes.append(f"{cand.label}: {str(exc).removeprefix(f'{cand.path} ')}, ignored")
            return None
        except OSError as exc:
            self.notes.append(f"{cand.label}: unreadable ({exc.strerror or exc}), ignored")
            return None
        self.budget -= min(len(data), limit)
        if len(data) > limit and prefix:
            self.notes.append(f"{cand.label}: over {limit} bytes, only the records before read")
            return data[:limit]
        if len(data) > limit:
            self.notes.append(f"{cand.label}: grew past {limit} bytes while read, ignored")
            return None
        return data

    def merged(self) -> RunLogs:
        by_epoch: dict[int, dict[str, MetricValue]] = {}
        by_step: dict[int, dict[str, MetricValue]] = {}
        times_at: dict[int, tuple[int, float]] = {}
        for layer in sorted(self.layers, key=lambda item: item.order):
            for target, source in ((by_epoch, layer.by_epoch), (by_step, layer.by_step)):
                for key, values in source.items():
                    row = target.setdefault(key, {})
                    for name, value in values.items():
                        row.setdefault(name, MetricValue(name, value, layer.source))
            for epoch, wall_time in layer.times.items():  # the nearest level's latest time
                level, old = times_at.get(epoch, (layer.order[0], wall_time))
                if level == layer.order[0]:
                    times_at[epoch] = (level, max(old, wall_time))
        return RunLogs(
            {k: by_epoch[k] for k in sorted(by_epoch)},
            {k: by_step[k] for k in sorted(by_step)},
            {k: times_at[k][1] for k in sorted(times_at)},
            tuple(self.files),
            tuple(self.notes),
            tuple(self.layers),
        )
