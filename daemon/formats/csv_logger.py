"""Lightning's CSVLogger files: `<save_dir>/<name>/version_<N>/metrics.csv` (and `<save_dir>/
version_<N>/` with an empty name), found beside a run without any configuration.

A CSVLogger writes sparse rows (a train row and a val row at one step, each with the other's
cells empty) under the sorted union of logged keys, and rewrites the whole file with a new header
when a new key appears; its `step` is `global_step - 1` at log time, its `epoch` 0-based like the
checkpoints' names (docs/checkpoints.md). The rows are parsed by the ordinary CSV log reader; this
module only finds the files, by listing (stat only, nothing opened), newest versions first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .tb_events import Listing

METRICS_FILE = "metrics.csv"
# The log candidates' kind (formats.log_discovery), parsed by core.lightning_csv.
KIND = "lightning-csv"
MAX_VERSIONS = 8  # a resumed fit() makes a new version each time: the newest few are read
MAX_CHILD_FOLDERS = 32  # folders looked into for `version_N/` (a logger's `name` folder)
_VERSION = re.compile(r"^version_(\d+)$")


def metrics_files(
    folder: Path,
    entries: Listing,
    lister: Callable[[Path], tuple[Listing, bool]],
    subfolders: Callable[[Path], list[str]],
) -> list[tuple[Path, object]]:
    """(path, lstat) of each CSVLogger `metrics.csv` in `folder`'s `version_N/` folders, or one
    folder below (`lightning_logs/version_N/`, `logs/version_N/`), newest version first.
    `subfolders`: the names of a folder's folders (a child is only looked into for
    `version_N/`: its files are not statted, a sibling run of 1,000 checkpoints costs a listing)."""
    found: list[tuple[int, Path, object]] = []
    children = sorted(n for n, i in entries.items() if i is None)[:MAX_CHILD_FOLDERS]
    for child in [None, *children]:
        base = folder if child is None else folder / child
        names = [n for n, i in entries.items() if i is None] if child is None else subfolders(base)
        versions = [(int(m[1]), n) for n in names if (m := _VERSION.match(n))]
        if child is not None and not versions:
            continue
        for number, name in sorted(versions, reverse=True)[:MAX_VERSIONS]:
            inner, _ = lister(base / name)
            info = inner.get(METRICS_FILE)
            if info is not None:
                found.append((number, base / name / METRICS_FILE, info))
    return [(path, info) for _n, path, info in found]


def is_logger_file(folder_name: str, name: str) -> bool:
    """A `version_N/metrics.csv` met directly (Lightning's default layout puts the checkpoints
    in `version_N/checkpoints/`, so the log sits in the run's parent folder)."""
    return name == METRICS_FILE and bool(_VERSION.match(folder_name))
