"""The files of one checkpoint that say what it holds besides its bytes: its `<checkpoint>.json`
sidecar, read as `fs.beneath` opens it (beneath the root, no symlink followed, bounded), and
`metrics_for`, one checkpoint through the run derivation alone. Never raises on bad data:
problems become notes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.model import MetricValue
from ..core.training_metrics import MAX_READ_BYTES, FilenameTemplate, as_int, parse_sidecar
from ..fs import beneath
from ..fs.fsops import Refused


@dataclass(frozen=True)
class MetricsResult:
    epoch: int | None
    step: int | None
    metrics: tuple[MetricValue, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Sidecar:
    """What a `<checkpoint>.json` sidecar says: epoch/step, metric values, and problems."""

    ints: dict[str, int]
    values: dict[str, float]
    notes: tuple[str, ...]
    label: str


def read_sidecar(path: Path, root: Path | None) -> Sidecar:
    """The sidecar at `path` (absent: empty), read beneath `root` like every metrics file."""
    notes: list[str] = []
    text = _read_text(path, path.name, notes, root)
    values = parse_sidecar(_load_json(text, path.name, notes)) if text is not None else {}
    ints: dict[str, int] = {}
    for key in ("epoch", "step"):
        number = values.pop(key, None)
        value = as_int(number)
        if number is not None and value is None:
            notes.append(f"sidecar {key} {number!r} is not an integer, ignored")
        elif value is not None:
            ints[key] = value
    return Sidecar(ints, values, tuple(notes), f"sidecar:{path.name}")


def metrics_for(
    checkpoint_path: Path,
    run_dir: Path,
    templates: Sequence[FilenameTemplate],
    metrics_files: Sequence[str],
    root: Path | None = None,
) -> MetricsResult:
    """Epoch, step and metrics of one checkpoint as its run's derivation sees it when it is the
    run's only checkpoint: its name, its sidecar, the run's logs (`formats.run_logs`, beneath
    `root`, default the run folder). The indexer derives whole runs (`usecases.derivation`)."""
    from ..core.derive import Logged, derive_run, member
    from ..core.naming import infer_naming
    from .run_logs import read_run_logs

    base = root if root is not None else run_dir
    try:
        logs = read_run_logs(run_dir, base, metrics_files)
    except (ValueError, OSError) as exc:  # not beneath the root, or gone
        return MetricsResult(None, None, (), (f"metrics logs not read: {exc}",))
    values = {e: {k: v.value for k, v in d.items()} for e, d in logs.by_epoch.items()}
    fields = infer_naming([checkpoint_path.name], values, templates).fields(checkpoint_path.name)
    sidecar = read_sidecar(Path(f"{checkpoint_path}.json"), root)
    found = member(0, checkpoint_path.name, fields, (sidecar.ints, sidecar.values, sidecar.label))
    logged = Logged(logs.by_epoch, logs.by_step, logs.epochs_logged)
    d = derive_run([found], logged).members[0]
    return MetricsResult(d.epoch, d.step, d.metrics, (*sidecar.notes, *logs.notes, *d.notes))


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
    except RecursionError:
        notes.append(f"{label}: JSON nested too deep to read, ignored")
        return None
    except ValueError as exc:
        notes.append(f"{label}: invalid JSON ({str(exc).splitlines()[0][:80]}), ignored")
        return None
    return obj
