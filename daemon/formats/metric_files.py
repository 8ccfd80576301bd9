"""Reading the metrics of one checkpoint from the files beside it: its name (through the
configured templates), a sidecar `<checkpoint>.json`, `metrics.json`-style files and CSVLogger
logs. Every file is read as `fs.beneath` opens it (beneath the root, no symlink followed, bounded);
the parsing is `core.metrics`'s. Never raises on bad data: problems become notes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.metrics import (
    MAX_READ_BYTES,
    FilenameTemplate,
    as_int,
    disagrees,
    from_filename,
    parse_csv_log,
    parse_metrics_file,
    parse_sidecar,
    to_float,
)
from ..core.model import MetricValue
from ..fs import beneath
from ..fs.fsops import Refused


@dataclass(frozen=True)
class MetricsResult:
    epoch: int | None
    step: int | None
    metrics: tuple[MetricValue, ...]
    notes: tuple[str, ...]


@dataclass
class _Found:
    """What `metrics_for` has gathered so far; `layers` are in precedence order."""

    ints: dict[str, int]
    named: dict[str, str]  # filename metric -> its text as written
    notes: list[str] = field(default_factory=list)
    layers: list[tuple[str, dict[str, float]]] = field(default_factory=list)


@dataclass(frozen=True)
class Sidecar:
    """What a `<checkpoint>.json` sidecar says: epoch/step, metric values, and problems."""

    ints: dict[str, int]
    values: dict[str, float]
    notes: tuple[str, ...]
    label: str


def read_sidecar(path: Path, root: Path | None) -> Sidecar:
    """The sidecar at `path` (absent: empty), read beneath `root` like every metrics file."""
    found = _Found({}, {})
    _add_sidecar(found, path, root)
    label, values = found.layers[0]
    return Sidecar(found.ints, values, tuple(found.notes), label)


def metrics_for(
    checkpoint_path: Path,
    run_dir: Path,
    templates: Sequence[FilenameTemplate],
    metrics_files: Sequence[str],
    root: Path | None = None,
) -> MetricsResult:
    """Epoch, step and metrics of one checkpoint. Files are read as `fs.beneath` opens
    them: beneath `root` (when given) without following symlinks, regular files only."""
    found = _from_filename(checkpoint_path.name, templates)
    sidecar = Path(f"{checkpoint_path}.json")
    _add_sidecar(found, sidecar, root)
    tiers: dict[str, list[tuple[str, dict[str, float]]]] = {"json": [], "csv": []}
    for path in _metric_paths(run_dir, metrics_files, {sidecar, checkpoint_path}, found.notes):
        label = path.relative_to(run_dir).as_posix()
        text = _read_text(path, label, found.notes, root)
        kind = "json" if path.name.endswith(".json") else "csv"
        if text is not None:
            tiers[kind].append((f"{kind}:{label}", _join(found, kind, label, text)))
    found.layers += tiers["json"] + tiers["csv"]
    found.layers.append(("filename", {k: to_float(v) for k, v in found.named.items()}))
    return _result(found)


def _from_filename(name: str, templates: Sequence[FilenameTemplate]) -> _Found:
    ints, named = from_filename(name, templates)
    return _Found(ints, named)


def _add_sidecar(found: _Found, path: Path, root: Path | None) -> None:
    text = _read_text(path, path.name, found.notes, root)
    values = parse_sidecar(_load_json(text, path.name, found.notes)) if text is not None else {}
    for key in ("epoch", "step"):
        number = values.pop(key, None)
        value = as_int(number)
        if number is not None and value is None:
            found.notes.append(f"sidecar {key} {number!r} is not an integer, ignored")
        elif value is not None:
            old = found.ints.get(key)
            if old is not None and old != value:
                found.notes.append(f"sidecar {key} {value} overrides filename {key} {old}")
            found.ints[key] = value
    found.layers.append((f"sidecar:{path.name}", values))


def _join(found: _Found, kind: str, label: str, text: str) -> dict[str, float]:
    """The values `text` (a metrics file) holds for this checkpoint's epoch or step."""
    epoch, step = found.ints.get("epoch"), found.ints.get("step")
    if "batch" in found.ints:  # saved mid-epoch: epoch-end rows do not describe it
        note = f"mid-epoch checkpoint (batch {found.ints['batch']}): epoch rows not joined"
        found.notes += [] if note in found.notes else [note]
        epoch = None
    if kind == "csv":
        first = text.split("\n", 1)[0]
        sep = next((s for s in (",", ";", "\t") if s in first), ",")
        return parse_csv_log(text, sep).get(epoch, {}) if epoch is not None else {}
    by_epoch, by_step = parse_metrics_file(_load_json(text, label, found.notes))
    from_epoch = by_epoch.get(epoch, {}) if epoch is not None else {}
    return from_epoch | (by_step.get(step, {}) if step is not None else {})


def _result(found: _Found) -> MetricsResult:
    merged: dict[str, MetricValue] = {}
    for source, values in found.layers:
        for name, value in values.items():
            merged.setdefault(name, MetricValue(name, value, source))
    for name, text in found.named.items():
        best = merged[name]
        if best.source != "filename" and disagrees(text, best.value):
            found.notes.append(
                f"filename {name} {text.strip()} disagrees with {best.source} {best.value:.10g}"
            )
    metrics = tuple(merged[k] for k in sorted(merged))
    ints = found.ints
    return MetricsResult(ints.get("epoch"), ints.get("step"), metrics, tuple(found.notes))


def _metric_paths(
    run_dir: Path, patterns: Sequence[str], skip: set[Path], notes: list[str]
) -> list[Path]:
    skipped = {p.absolute() for p in skip}
    out: list[Path] = []
    for pattern in patterns:
        try:
            found = sorted(run_dir.glob(pattern))
        except (ValueError, NotImplementedError, OSError) as exc:
            notes.append(f"metrics file pattern {pattern!r} ignored: {exc}")
            continue
        for path in found:
            if path not in out and path.absolute() not in skipped:
                out.append(path)
    return out


def _read_text(path: Path, label: str, notes: list[str], root: Path | None) -> str | None:
    """The file's text; None (with a note, unless it is simply absent) when it cannot be had."""
    try:
        data = beneath.read_bounded(path, MAX_READ_BYTES, root)
        if data is None:
            notes.append(f"{label}: larger than {MAX_READ_BYTES} bytes, ignored")
            return None
        return data.decode("utf-8-sig")
    except FileNotFoundError:
        return None
    except Refused as exc:  # a symlink, a FIFO, a symlinked folder: never read
        notes.append(f"{label}: {str(exc).removeprefix(str(path) + ' ')}, ignored")
    except OSError as exc:
        notes.append(f"{label}: unreadable ({exc.strerror or exc}), ignored")
    except UnicodeDecodeError:
        notes.append(f"{label}: not UTF-8 text, ignored")
    return None


def _load_json(text: str, label: str, notes: list[str]) -> object:
    try:
        obj: object = json.loads(text)
    except (ValueError, RecursionError) as exc:
        notes.append(f"{label}: invalid JSON ({str(exc).splitlines()[0][:80]}), ignored")
        return None
    return obj
