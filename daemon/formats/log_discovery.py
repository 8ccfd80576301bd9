"""Which files may be a run's training logs: its folder, then each folder above it up to the root
(nearest first). In each folder: the files the root's `metrics_files` patterns name (a pattern
reaching into subfolders only in the run folder, so a `**` never sweeps a sibling run), files
that may be CSVLogger or JSON logs by their content (sniffed later), and TensorBoard event files
there and up to `TB_DEPTH` folders below (`tb_events.search_event_files`).

A folder above the run that other runs share (a known run, or checkpoints found, in another of
its child branches: `lr_a/`, `lr_b/` beside `lr_a.csv`, `lr_b.csv`) holds logs of several
experiments: a text log there that names a child folder is that branch's only (`lr_b.csv`,
`lr_b_history.csv` are lr_b's, never lr_a's); one that names none (`exp/history.csv` above
`exp/ckpt/` and `exp/weights/`, both written by one `fit()`) is `shared`: it belongs to every run
below it whose epochs it covers, which derivation decides (`usecases.derivation.covered_logs`).
A folder above a single run (`exp/training.log` over `exp/checkpoints/`) gives all its logs to
that run.

Stat only: nothing is opened here. Known runs are looked up in a `RunIndex` (one per call, or
the caller's for a whole scan), so the cost does not grow with the number of runs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import stat
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.log_sniff import is_json_log_name, looks_like_checkpoint
from ..core.training_metrics import MAX_READ_BYTES
from . import csv_logger, tb_events
from .run_index import RunIndex, as_index
from .tb_events import Listing

TB_DEPTH = 4  # folders below: logs/fit/20240101-1200/validation
MAX_ENTRIES_PER_FOLDER = 20_000  # a folder of 10,000 checkpoints is still listed whole
MAX_SNIFFED_PER_FOLDER = 64
MAX_PATTERN_MATCHES = 64  # per pattern and folder
MAX_TB_FOLDERS = 256  # folders listed while looking for event files, per level
MAX_TB_FILES = 64  # per level
MAX_NAME_SEPARATORS = 16  # in a log's name, while looking for the folder it names
_TEXT_FIRST = (".csv", ".log", ".tsv", ".txt", "")  # sniffed first: where CSV logs usually are

# Whose a file of the folder is: True this run's, False another branch's, None nobody's in
# particular (a shared folder's log naming no branch: every run below it whose epochs it covers).
Claim = Callable[[str], bool | None]


@dataclass(frozen=True)
class Candidate:
    path: Path
    label: str
    kind: str  # "csv" | "json" | "jsonl" (configured or by name), "sniff", "tensorboard",
    # "lightning-csv" (formats.csv_logger)
    level: int  # 0: the run folder, 1: its parent, ...
    size: int
    mtime_ns: int
    configured: bool  # matched a `metrics_files` pattern: problems are noted, not skipped
    shared: bool = False  # in a folder several runs share, naming none of them


@dataclass
class Found:
    """The candidates, nearest folder first, and the configured matches left out because they
    sit in a folder shared by several runs and name another run's folder (for a note)."""

    candidates: list[Candidate]
    withheld: list[str]


def candidates(
    run_dir: Path,
    root: Path,
    patterns: Sequence[str],
    other_runs: Collection[Path] | RunIndex,
    notes: list[str],
) -> Found:
    """Raises ValueError when `run_dir` is not beneath `root`."""
    found = Found([], [])
    index = as_index(other_runs)
    run_abs = Path(os.path.abspath(run_dir))
    root_abs = Path(os.path.abspath(root))
    chain = _folders(run_abs, root_abs)
    for level, folder in enumerate(chain):
        entries, _ = _entries(folder, root_abs, notes)
        events = _event_files(folder, level, root_abs, run_abs, index, notes, entries)
        keep = _own_logs(chain[level - 1].name, entries, index.branches(folder), events.shared)
        taken: set[str] = set()
        withheld: list[str] = []
        configured = _configured(folder, level, patterns, entries, root_abs, notes, keep, withheld)
        for cand in configured:
            if cand.label not in taken:
                taken.add(cand.label)
                found.candidates.append(cand)
        found.candidates += _sniffable(folder, level, entries, taken, root_abs, keep)
        if level <= 1:  # Lightning's CSVLogger: `logs/version_N/metrics.csv` beside the run
            found.candidates += _csv_logger(folder, level, entries, root_abs, notes, keep, taken)
        found.candidates += events.files
        found.withheld += sorted(set(withheld))
    return found


def _csv_logger(
    folder: Path,
    level: int,
    entries: Listing,
    root: Path,
    notes: list[str],
    keep: Claim | None,
    taken: set[str],
) -> list[Candidate]:
    lister = functools.partial(_entries, root=root, notes=notes)
    subfolders = functools.partial(_subfolders, root=root, notes=notes)
    out = []
    for path, info in csv_logger.metrics_files(folder, entries, lister, subfolders):
        top = path.relative_to(folder).parts[0]
        whose = True if keep is None else keep(top)
        if whose is False or label(path, root) in taken:
            continue
        assert isinstance(info, os.stat_result)
        cand = _candidate(path, root, csv_logger.KIND, level, info, configured=False)
        out.append(cand if whose else dataclasses.replace(cand, shared=True))
    return out


@dataclass(frozen=True)
class _Events:
    files: list[Candidate]
    shared: bool


def _event_files(
    folder: Path,
    level: int,
    root: Path,
    run: Path,
    index: RunIndex,
    notes: list[str],
    entries: Listing,
) -> _Events:
    limits = (TB_DEPTH, MAX_TB_FOLDERS, MAX_TB_FILES)
    lister = functools.partial(_entries, root=root, notes=notes)
    found = tb_events.search_event_files(folder, entries, lister, run, index, limits)
    if found.problem:
        notes.append(f"{label(folder, root)}: {found.problem}, the rest unread")
    files = [_candidate(p, root, "tensorboard", level, i, configured=False) for p, i in found.files]
    return _Events(files, found.shared)


def _own_logs(branch: str, entries: Listing, known: Collection[str], shared: bool) -> Claim | None:
    """None (every file counts) unless the folder is shared; then whose a file is (`Claim`):
    this run's when its stem names `branch` and no longer (or as long) other child folder of
    the folder, a listed one or a known run's (`lr_b_2.csv` beside `lr_b/` and `lr_b_2/` is
    lr_b_2's); another's when it names another child folder; nobody's in particular (None) when
    it names none. Names are compared as they are (case included); a lookup per part of the
    name, never a pass over the folder's children."""
    if not shared:
        return None

    def other(part: str) -> bool:
        return part != branch and (part in known or (part in entries and entries[part] is None))

    def claim(name: str) -> bool | None:
        stem = os.path.splitext(name)[0]
        if names_folder(stem, branch):
            return not any(other(part) for part in _bounded_parts(stem, len(branch)))
        return False if any(other(part) for part in _bounded_parts(stem, 1)) else None

    return claim


def names_folder(stem: str, folder: str) -> bool:
    """Whether a file's stem is `folder`'s name or holds it between non-alphanumeric characters
    (`lr_b_history` names `lr_b`; `lr_b2` and `xlr_b` do not)."""
    if not folder:
        return False
    start = stem.find(folder)
    while start >= 0:
        end = start + len(folder)
        if (start == 0 or not stem[start - 1].isalnum()) and (
            end == len(stem) or not stem[end].isalnum()
        ):
            return True
        start = stem.find(folder, start + 1)
    return False


def _bounded_parts(stem: str, min_len: int) -> list[str]:
    """Every part of `stem` between non-alphanumeric characters (or its ends) of at least
    `min_len` characters: the folder names it could be naming. A name with too many separators
    to try them all (hostile) gives the parts from its start or to its end only."""
    cuts = [i for i, c in enumerate(stem) if not c.isalnum()]
    starts, ends = [0, *(i + 1 for i in cuts)], [*cuts, len(stem)]
    if len(cuts) > MAX_NAME_SEPARATORS:
        parts = [*(stem[:e] for e in ends), *(stem[s:] for s in starts)]
        return [p for p in parts if len(p) >= min_len]
    return [stem[s:e] for s in starts for e in ends if e - s >= min_len]


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
    for entry, is_dir in _listing(folder, root, notes):
        if is_dir:
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
    return out, checkpoints


def _subfolders(folder: Path, root: Path, notes: list[str]) -> list[str]:
    """The names of `folder`'s real folders (not symlinks), from the listing alone (no stat):
    the entries `_entries` maps to None, with its cap and its notes."""
    return [entry.name for entry, is_dir in _listing(folder, root, notes) if is_dir]


def _listing(folder: Path, root: Path, notes: list[str]) -> Iterator[tuple[os.DirEntry[str], bool]]:
    """`folder`'s entries, each with whether it is a real folder (not a symlink to one), the
    first MAX_ENTRIES_PER_FOLDER only; a note when there are more, or when it cannot be listed
    (the folder test is made here, so its OSError is that note too)."""
    try:
        with os.scandir(folder) as listing:
            for count, entry in enumerate(listing):
                if count >= MAX_ENTRIES_PER_FOLDER:
                    notes.append(f"{label(folder, root)}: over {count} entries, the rest unread")
                    break
                yield entry, entry.is_dir(follow_symlinks=False)
    except OSError as exc:
        notes.append(f"{label(folder, root)}: cannot list ({exc.strerror or exc})")


def _configured(
    folder: Path,
    level: int,
    patterns: Sequence[str],
    entries: Listing,
    root: Path,
    notes: list[str],
    keep: Claim | None,
    withheld: list[str],
) -> list[Candidate]:
    """The files the patterns name (another branch's, by `keep`, go to `withheld`)."""
    out: list[Candidate] = []
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
            whose = True if keep is None else keep(path.name)
            if whose is False:
                withheld.append(label(path, root))
                continue
            kind = _name_kind(path.name) or "csv"
            cand = _candidate(path, root, kind, level, info, configured=True)
            out.append(cand if whose else dataclasses.replace(cand, shared=True))
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
    keep: Claim | None,
) -> list[Candidate]:
    """Files directly in `folder` that may be logs by their content, most likely first."""
    picked: list[tuple[int, str, os.stat_result]] = []
    unclaimed: set[str] = set()
    for name, info in entries.items():
        if info is None or info.st_size > MAX_READ_BYTES or info.st_size == 0:
            continue
        if looks_like_checkpoint(name) or tb_events.is_event_file(name) or name.startswith("."):
            continue
        whose = True if keep is None else keep(name)
        if label(folder / name, root) in taken or whose is False:
            continue
        if whose is None:
            unclaimed.add(name)
        rank = 0 if _name_kind(name) else 1 if os.path.splitext(name)[1] in _TEXT_FIRST else 2
        picked.append((rank, name, info))
    picked.sort(key=lambda item: (item[0], item[1]))
    out = []
    for _, name, info in picked[:MAX_SNIFFED_PER_FOLDER]:
        kind = _name_kind(name) or "sniff"
        if csv_logger.is_logger_file(folder.name, name):
            kind = csv_logger.KIND
        cand = _candidate(folder / name, root, kind, level, info, configured=False)
        out.append(dataclasses.replace(cand, shared=True) if name in unclaimed else cand)
    return out


def _name_kind(name: str) -> str | None:
    """ "json" / "jsonl" for a JSON log's name, else None."""
    if not is_json_log_name(name):
        return None
    return "jsonl" if name.lower().endswith(".jsonl") else "json"


def _candidate(
    path: Path, root: Path, kind: str, level: int, info: os.stat_result, *, configured: bool
) -> Candidate:
    return Candidate(
        path, label(path, root), kind, level, info.st_size, info.st_mtime_ns, configured
    )


def label(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
