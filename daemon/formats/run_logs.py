"""The training logs of one run, wherever they sit: its folder, then each folder above it up to
the root (nearest first). In each folder: the files the root's `metrics_files` patterns name (a
pattern reaching into subfolders only in the run folder, so a `**` never sweeps a sibling run),
CSVLogger logs under any name and JSON logs (recognised by `core.log_sniff`), and TensorBoard
event files there and up to `TB_DEPTH` folders below, never inside another run, and above the
run folder only while no other run shares the folder (`tb_events.run_event_files`). A nearer
folder's value wins; within one folder JSON > CSV > TensorBoard.

Every file is opened through `fs.beneath` (beneath the root, no symlink followed, no FIFO
opened); entries, candidates, bytes per file and per run, and records are bounded; bad bytes
become notes, never exceptions. Stat and small reads only: no HDF5, checkpoints not even statted.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import Refused
from ..core.log_sniff import (
    SNIFF_BYTES,
    csv_log_separator,
    is_json_log_name,
    looks_like_checkpoint,
    parse_json_log,
)
from ..core.metrics import MAX_READ_BYTES, ByKey, parse_csv_log
from ..core.model import MetricValue
from ..core.tb_scalars import Scalar, to_metrics
from ..fs import beneath
from . import tb_events
from .tb_events import Listing

TB_DEPTH = 4  # folders below: logs/fit/20240101-1200/validation
MAX_ENTRIES_PER_FOLDER = 20_000  # a folder of 10,000 checkpoints is still listed whole
MAX_SNIFFED_PER_FOLDER = 64
MAX_PATTERN_MATCHES = 64  # per pattern and folder
MAX_TB_FOLDERS = 256  # folders listed while looking for event files, per level
MAX_TB_FILES = 64  # per level
MAX_RUN_BYTES = 64 * 2**20  # read per run, all files together
_TEXT_FIRST = (".csv", ".log", ".tsv", ".txt", "")  # sniffed first: where CSV logs usually are
_TIERS = {"json": 0, "csv": 1, "tensorboard": 2}


@dataclass(frozen=True)
class LogFile:
    label: str  # path relative to the root, e.g. "exp1/training.log"
    kind: str  # "csv" | "json" | "tensorboard"
    mtime_ns: int
    epochs: int  # highest 1-based epoch this file has a row for (0: none)


@dataclass(frozen=True)
class RunLogs:
    by_epoch: Mapping[int, Mapping[str, MetricValue]]  # 1-based epoch -> name -> value
    by_step: Mapping[int, Mapping[str, MetricValue]]
    epoch_times: Mapping[int, float]  # 1-based epoch -> wall time it was logged (TensorBoard)
    files: tuple[LogFile, ...]
    notes: tuple[str, ...]

    @property
    def epochs_logged(self) -> int:
        """The highest epoch any one log file has a row for (0: no epoch log)."""
        return max((f.epochs for f in self.files), default=0)

    def values_at(self, epoch: int) -> dict[str, float]:
        return {name: m.value for name, m in self.by_epoch.get(epoch, {}).items()}


@dataclass(frozen=True)
class _Candidate:
    path: Path
    label: str
    kind: str  # "csv" | "json" | "jsonl" (configured or by name), "sniff", "tensorboard"
    level: int  # 0: the run folder, 1: its parent, ...
    size: int
    mtime_ns: int
    configured: bool  # matched a `metrics_files` pattern: problems are noted, not skipped


@dataclass
class _Layer:
    order: tuple[int, int, int]  # (level, tier, rank within them): the merge takes the first
    source: str
    by_epoch: ByKey
    by_step: ByKey
    times: dict[int, float] = field(default_factory=dict)


def read_run_logs(
    run_dir: Path, root: Path, patterns: Sequence[str], other_runs: Collection[Path] = ()
) -> RunLogs:
    """Every metric the run's logs hold, by epoch and by step, with their sources. `other_runs`:
    the run folders the caller knows (their logs are never this run's). Raises ValueError when
    `run_dir` is not beneath `root`; never on what the files hold."""
    reader = _Reader(Path(os.path.abspath(root)))
    tb_groups: dict[Path, list[_Candidate]] = {}
    for rank, cand in enumerate(_candidates(run_dir, root, patterns, other_runs, reader.notes)):
        if cand.kind == "tensorboard":
            tb_groups.setdefault(cand.path.parent, []).append(cand)
        else:
            reader.text_log(cand, rank)
    # The newest session's folder first (`logs/fit/<timestamp>/train`): its values win.
    for rank, folder in enumerate(sorted(tb_groups, reverse=True)):
        reader.event_folder(folder, rank, tb_groups[folder])
    return reader.merged()


def logs_signature(
    run_dir: Path, root: Path, patterns: Sequence[str], other_runs: Collection[Path] = ()
) -> tuple[tuple[str, int, int], ...]:
    """(label, size, mtime_ns) of every file `read_run_logs` would open, from stat alone: when
    it is unchanged between two scans, so are the run's logs."""
    found = _candidates(run_dir, root, patterns, other_runs, [])
    return tuple(sorted((c.label, c.size, c.mtime_ns) for c in found))


# --- which files --------------------------------------------------------------------------------


def _candidates(
    run_dir: Path,
    root: Path,
    patterns: Sequence[str],
    other_runs: Collection[Path],
    notes: list[str],
) -> list[_Candidate]:
    out: list[_Candidate] = []
    others = {Path(os.path.abspath(p)) for p in other_runs}
    run_abs = Path(os.path.abspath(run_dir))
    others.discard(run_abs)
    root_abs = Path(os.path.abspath(root))
    for level, folder in enumerate(_folders(run_abs, root_abs)):
        entries, _ = _entries(folder, root_abs, notes)
        taken: set[str] = set()
        for cand in _configured(folder, level, patterns, entries, root_abs, notes):
            if cand.label not in taken:
                taken.add(cand.label)
                out.append(cand)
        out += _sniffable(folder, level, entries, taken, root_abs)
        out += _event_files(folder, level, root_abs, run_abs, others, notes, entries)
    return out


def _folders(run_dir: Path, root: Path) -> list[Path]:
    """The run folder, then each folder above it up to and including the root."""
    if run_dir != root and root not in run_dir.parents:
        raise ValueError(f"{run_dir} is not beneath {root}")
    chain = [run_dir]
    while chain[-1] != root:
        chain.append(chain[-1].parent)
    return chain


def _entries(folder: Path, root: Path, notes: list[str]) -> tuple[Listing, bool]:
    """(name -> lstat of a regular file or None for a real folder, whether checkpoint files
    are there). Symlinks, FIFOs and other special files are left out: never followed, never
    opened; checkpoints too, unstatted (the folder type comes from the listing itself)."""
    out: dict[str, os.stat_result | None] = {}
    checkpoints = False
    try:
        with os.scandir(folder) as listing:
            for count, entry in enumerate(listing):
                if count >= MAX_ENTRIES_PER_FOLDER:
                    notes.append(f"{_label(folder, root)}: over {count} entries, the rest unread")
                    break
                if entry.is_dir(follow_symlinks=False):
                    out[entry.name] = None
                elif not entry.is_file(follow_symlinks=False):
                    continue
                elif looks_like_checkpoint(entry.name):
                    checkpoints = True
                else:
                    try:
                        out[entry.name] = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
    except OSError as exc:
        notes.append(f"{_label(folder, root)}: cannot list ({exc.strerror or exc})")
    return out, checkpoints


def _configured(
    folder: Path,
    level: int,
    patterns: Sequence[str],
    entries: Listing,
    root: Path,
    notes: list[str],
) -> list[_Candidate]:
    out: list[_Candidate] = []
    for pattern in patterns:
        if "/" in pattern or "**" in pattern:
            if level:
                continue  # a pattern reaching into subfolders stays within the run folder
            paths = _glob(folder, pattern, notes)
        elif not any(c in pattern for c in "*?["):
            paths = [folder / pattern]  # a plain name: looked at even if a symlink (noted)
        else:  # from the listing: a folder of 10,000 checkpoints is not globbed per pattern
            names = sorted(n for n, i in entries.items() if i and fnmatch.fnmatchcase(n, pattern))
            paths = [folder / n for n in names[:MAX_PATTERN_MATCHES]]
        for path in paths:
            info = _lstat(path)
            if info is None or tb_events.is_event_file(path.name):
                continue
            kind = _name_kind(path.name) or "csv"
            out.append(_candidate(path, root, kind, level, info, configured=True))
    return out


def _glob(folder: Path, pattern: str, notes: list[str]) -> list[Path]:
    try:
        found: list[Path] = []
        for path in folder.glob(pattern):
            found.append(path)
            if len(found) >= MAX_PATTERN_MATCHES:
                break
        return sorted(found)
    except (ValueError, NotImplementedError, OSError) as exc:
        notes.append(f"metrics file pattern {pattern!r} ignored: {exc}")
        return []


def _lstat(path: Path) -> os.stat_result | None:
    """The lstat of anything but a folder: a configured name that is a symlink or a FIFO is
    refused by `fs.beneath` before any open, with a note."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return None if stat.S_ISDIR(info.st_mode) else info


def _sniffable(
    folder: Path,
    level: int,
    entries: Listing,
    taken: set[str],
    root: Path,
) -> list[_Candidate]:
    """Files directly in `folder` that may be logs by their content, most likely first."""
    picked: list[tuple[int, str, os.stat_result]] = []
    for name, info in entries.items():
        if info is None or info.st_size > MAX_READ_BYTES or info.st_size == 0:
            continue
        if looks_like_checkpoint(name) or tb_events.is_event_file(name) or name.startswith("."):
            continue
        if _label(folder / name, root) in taken:
            continue
        rank = 0 if _name_kind(name) else 1 if os.path.splitext(name)[1] in _TEXT_FIRST else 2
        picked.append((rank, name, info))
    picked.sort(key=lambda item: (item[0], item[1]))
    out = []
    for _, name, info in picked[:MAX_SNIFFED_PER_FOLDER]:
        kind = _name_kind(name) or "sniff"
        out.append(_candidate(folder / name, root, kind, level, info, configured=False))
    return out


def _name_kind(name: str) -> str | None:
    """ "json" / "jsonl" for a JSON log's name, else None."""
    if not is_json_log_name(name):
        return None
    return "jsonl" if name.lower().endswith(".jsonl") else "json"


def _event_files(
    folder: Path,
    level: int,
    root: Path,
    run: Path,
    others: set[Path],
    notes: list[str],
    entries: Listing,
) -> list[_Candidate]:
    limits = (TB_DEPTH, MAX_TB_FOLDERS, MAX_TB_FILES)
    lister = functools.partial(_entries, root=root, notes=notes)
    found, problem = tb_events.run_event_files(folder, entries, lister, run, others, limits)
    if problem:
        notes.append(f"{_label(folder, root)}: {problem}, the rest unread")
    return [_candidate(p, root, "tensorboard", level, i, configured=False) for p, i in found]


def _candidate(
    path: Path, root: Path, kind: str, level: int, info: os.stat_result, *, configured: bool
) -> _Candidate:
    label = _label(path, root)
    return _Candidate(path, label, kind, level, info.st_size, info.st_mtime_ns, configured)


def _label(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


# --- reading them -------------------------------------------------------------------------------


@dataclass
class _Reader:
    """One run's reading: the budget left, and the layers, files and notes gathered."""

    root: Path
    budget: int = MAX_RUN_BYTES
    layers: list[_Layer] = field(default_factory=list)
    files: list[LogFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text_log(self, cand: _Candidate, rank: int) -> None:
        data = self.read(cand)
        try:
            text = None if data is None else data.decode("utf-8-sig")
        except UnicodeDecodeError:
            self.notes += [f"{cand.label}: not UTF-8 text, ignored"] if cand.configured else []
            return
        if text is None:
            return
        kind = "csv" if cand.kind in ("csv", "sniff") else "json"
        by_step: ByKey = {}
        if kind == "csv":
            first = text.split("\n", 1)[0]
            by_epoch = parse_csv_log(text, next((s for s in (",", ";", "\t") if s in first), ","))
        else:
            by_epoch, by_step, problem = parse_json_log(text, lines=cand.kind == "jsonl")
            found = bool(by_epoch or by_step)
            if problem and (cand.configured or found):
                self.notes.append(f"{cand.label}: {problem}" + ("" if found else ", ignored"))
            if not (found or cand.configured):
                return  # some other JSON (a config, a vocabulary): not a log
        order = (cand.level, _TIERS[kind], rank)
        self.layers.append(_Layer(order, f"{kind}:{cand.label}", by_epoch, by_step))
        self.files.append(LogFile(cand.label, kind, cand.mtime_ns, max(by_epoch, default=0)))

    def event_folder(self, folder: Path, rank: int, group: list[_Candidate]) -> None:
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
        order = (group[0].level, _TIERS["tensorboard"], rank)
        source = f"tensorboard:{_label(folder, self.root)}"
        self.layers.append(
            _Layer(order, source, metrics.by_epoch, metrics.by_step, metrics.epoch_times)
        )

    def read(self, cand: _Candidate) -> bytes | None:
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
        )
