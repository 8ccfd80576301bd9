"""Epoch, step and metric values for a checkpoint.

Sources, highest precedence first: a sidecar `<checkpoint>.json`, `metrics.json`-style files,
CSVLogger files, and the values Keras's ModelCheckpoint wrote into the file name. Everything here
is pure parsing except `metrics_for`, which does a few small reads and never raises on bad data.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from daemon import beneath
from daemon.fsops import Refused
from daemon.model import MetricValue

INT_FIELDS = frozenset({"epoch", "batch", "step"})
ByKey = dict[int, dict[str, float]]  # epoch or step -> {metric: value}
MAX_READ_BYTES = 16 * 2**20  # metrics files larger than this are skipped, with a note

_SPEC = re.compile(
    r"(?:.?(?P<align>[<>=^]))?[-+ ]?z?(?P<alt>\#)?(?P<zero>0)?"
    r"(?P<width>\d+)?(?P<group>[,_])?(?:\.(?P<prec>\d+))?(?P<type>.)?",
    re.S,
)
_NANINF = r"0*(?i:nan|inf)"
_GENERAL = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_DIGITS = frozenset("0123456789")
_FLOAT_TAIL = _DIGITS | frozenset(".eE+-naifNAIF")
_TF_SUFFIX = re.compile(r"(.+)\.(?:index|data-\d+-of-\d+)")
_FALLBACK = (
    ("step", re.compile(r"(?<![A-Za-z0-9])(?:ckpt|step)[-_]?(\d+)", re.I)),
    ("epoch", re.compile(r"(?<![A-Za-z0-9])(?:epoch[-_]?|e)(\d+)", re.I)),
)


@dataclass(frozen=True)
class _Field:
    name: str
    regex: str
    tail: frozenset[str] | None  # chars the text may hold after its first; None: self-delimiting


@dataclass(frozen=True)
class FilenameTemplate:
    """A ModelCheckpoint filepath template (basename only), compiled for parsing names back."""

    text: str
    fields: tuple[str, ...]
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names, regex = _compile(self.text)
        if names != self.fields:
            raise ValueError(f"template {self.text!r} has fields {names}, not {self.fields}")
        object.__setattr__(self, "_regex", regex)

    def match(self, filename: str) -> dict[str, int | float] | None:
        texts = self._texts(filename)
        return None if texts is None else _convert(texts)

    def _texts(self, filename: str) -> dict[str, str] | None:
        """The raw text of each field in `filename`, or None when it does not match."""
        m = self._regex.fullmatch(filename)
        if m is None:
            return None
        return {name: m.group(f"f{i}") for i, name in enumerate(self.fields)}


def _convert(texts: dict[str, str]) -> dict[str, int | float] | None:
    try:
        return {k: int(v) if k in INT_FIELDS else _to_float(v) for k, v in texts.items()}
    except ValueError:  # an integer longer than Python's digit limit
        return None


def compile_template(text: str) -> FilenameTemplate:
    names, _ = _compile(text)
    return FilenameTemplate(text.rsplit("/", 1)[-1], names)


@lru_cache(maxsize=256)
def _compile(text: str) -> tuple[tuple[str, ...], re.Pattern[str]]:
    base = text.rsplit("/", 1)[-1]
    if not base:
        raise ValueError(f"template {text!r}: empty file name")
    try:
        tokens = list(string.Formatter().parse(base))
    except ValueError as exc:
        raise ValueError(f"template {text!r}: {exc}") from None
    parts: list[str] = []
    fields: list[_Field] = []
    sep = ""  # literal text since the last field
    for literal, name, spec, conversion in tokens:
        parts.append(re.escape(literal))
        sep += literal
        if name is None:
            continue
        fld = _field(text, name, spec or "", conversion)
        if fld.name in (f.name for f in fields):
            raise ValueError(f"template {text!r}: field {{{fld.name}}} appears twice")
        if fields:
            _check_separator(text, fields[-1], sep)
        parts.append(f"(?P<f{len(fields)}>{fld.regex})")
        fields.append(fld)
        sep = ""
    return tuple(f.name for f in fields), re.compile("".join(parts))


def _check_separator(text: str, prev: _Field, sep: str) -> None:
    if not sep:
        raise ValueError(f"template {text!r}: no literal text after {{{prev.name}}}")
    if prev.tail is not None and set(sep) <= prev.tail:
        raise ValueError(
            f"template {text!r}: separator {sep!r} after {{{prev.name}}} could be part of its value"
        )


def _field(text: str, name: str, spec: str, conversion: str | None) -> _Field:
    where = f"template {text!r}: {{{name}}}"
    if name == "" or name.isdigit():
        raise ValueError(f"template {text!r}: positional field {{{name}}}; name the field")
    if any(c in name for c in ".[]{}"):
        raise ValueError(f"{where}: attribute or index access is not supported")
    if conversion:
        raise ValueError(f"{where}: conversion !{conversion} is not supported")
    if "{" in spec or "}" in spec:
        raise ValueError(f"{where}: nested fields in the format spec are not supported")
    m = _SPEC.fullmatch(spec)
    if m is None or m["align"] or m["alt"] or m["group"]:
        raise ValueError(f"{where}: format spec {spec!r} is not supported")
    kind = m["type"]
    is_int = name in INT_FIELDS
    if kind not in ((None, "d") if is_int else (None, "e", "E", "f", "F", "g", "G")):
        what = "an integer" if is_int else "a float metric"
        raise ValueError(f"{where}: format type {kind!r} is not supported for {what}")
    try:
        format(1 if is_int else 0.5, spec)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    padded = bool(m["width"]) and not m["zero"]
    lead = " *[-+]?" if padded else "[-+ ]?"
    pad_tail = frozenset(" +-") if padded else frozenset()
    if is_int:
        return _Field(name, lead + r"\d+", _DIGITS | pad_tail)
    prec = 6 if m["prec"] is None else int(m["prec"])
    dec = rf"\.\d{{{prec}}}" if prec else ""
    body, tail = {  # f with decimals: the text ends `prec` digits after its ".", whatever follows
        "f": (r"\d+" + dec, None if prec else _DIGITS | frozenset("naifNAIF")),
        "e": (rf"0*\d{dec}[eE][-+]\d{{2,}}", _FLOAT_TAIL),
    }.get((kind or "g").lower(), (_GENERAL, _FLOAT_TAIL))
    return _Field(name, f"{lead}(?:{body}|{_NANINF})", None if tail is None else tail | pad_tail)


def _to_float(text: str) -> float:
    s = text.strip()
    m = re.fullmatch(r"([-+]?)0*((?i:nan|inf))", s)
    return float(m[1] + m[2]) if m else float(s)


def _as_int(value: object) -> int | None:
    """An integral JSON number or a decimal string (CSV cell, JSON key) as int, else None."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value: object) -> float | None:
    """A JSON number as float; bools, strings, and ints beyond float range are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if isinstance(value, float) or abs(value) < 2**1023 else None


def parse_csv_log(text: str, sep: str = ",") -> ByKey:
    """Keras CSVLogger text -> {1-based epoch: {metric: value}} (the last row of an epoch wins)."""
    rows, partial = _csv_rows(text, sep)
    header: list[str] = []
    out: ByKey = {}
    for row in rows:
        if "epoch" in row:  # the header (again, if runs were concatenated)
            header = row
        elif header and len(row) == len(header):
            _add_csv_row(out, header, row)
    if header and partial is not None and len(partial) == len(header):
        _add_csv_row(out, header, partial)
    return out


def _csv_rows(text: str, sep: str) -> tuple[list[list[str]], list[str] | None]:
    """Complete rows, and the unterminated last line (the trainer may be mid-write) if any."""
    body, partial = text, ""
    if not text.endswith(("\n", "\r")):
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        body, partial = text[:cut], text[cut:]
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO(body, newline=""), delimiter=sep):
            rows.append([c.strip() for c in row])
        last = next(csv.reader([partial], delimiter=sep), None) if partial else None
    except csv.Error:  # e.g. a field over the csv module's size limit: keep what came before
        return rows, None
    return rows, None if last is None else [c.strip() for c in last]


def _add_csv_row(out: ByKey, header: list[str], row: list[str]) -> None:
    epoch = _as_int(row[header.index("epoch")])
    if epoch is not None:
        pairs = ((k, _to_float_or_none(v)) for k, v in zip(header, row, strict=True))
        out[epoch + 1] = {k: v for k, v in pairs if v is not None and _is_name(k) and k != "epoch"}


def _is_name(key: str) -> bool:
    return bool(key) and key.isprintable()  # binary junk that happened to decode is not a name


def _to_float_or_none(cell: str) -> float | None:
    try:
        return float(cell)  # "NA", "" and other text raise
    except ValueError:
        return None


def parse_sidecar(obj: object) -> dict[str, float]:
    """A flat JSON object of numbers; epoch/step are kept (as floats), anything else dropped."""
    if not isinstance(obj, dict):
        return {}
    pairs = ((k, _as_float(v)) for k, v in obj.items() if isinstance(k, str) and _is_name(k))
    return {k: v for k, v in pairs if v is not None}


def parse_metrics_file(obj: object) -> tuple[ByKey, ByKey]:
    """`metrics.json` -> (by 1-based epoch, by step). Records for the same key are merged."""
    if isinstance(obj, list):
        return _keyed(obj, "epoch"), _keyed(obj, "step")
    if isinstance(obj, dict) and ("epochs" in obj or "steps" in obj):
        return _keyed(obj.get("epochs"), "epoch"), _keyed(obj.get("steps"), "step")
    return _keyed(obj, "epoch"), {}


def _keyed(obj: object, key_name: str) -> ByKey:
    items: list[tuple[int | None, object]] = []
    if isinstance(obj, dict):
        items = [(_as_int(k), v) for k, v in obj.items()]
    elif isinstance(obj, list):
        items = [(_as_int(r.get(key_name)), r) for r in obj if isinstance(r, dict)]
    out: ByKey = {}
    for key, record in items:
        values = {k: v for k, v in parse_sidecar(record).items() if k not in INT_FIELDS}
        if key is not None and values:
            out.setdefault(key, {}).update(values)
    return out


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


def metrics_for(
    checkpoint_path: Path,
    run_dir: Path,
    templates: Sequence[FilenameTemplate],
    metrics_files: Sequence[str],
    root: Path | None = None,
) -> MetricsResult:
    """Epoch, step and metrics of one checkpoint. Files are read as `daemon.beneath` opens
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
    found.layers.append(("filename", {k: _to_float(v) for k, v in found.named.items()}))
    return _result(found)


def _from_filename(name: str, templates: Sequence[FilenameTemplate]) -> _Found:
    tf_prefix = _TF_SUFFIX.fullmatch(name)
    for candidate in (name, tf_prefix[1]) if tf_prefix else (name,):
        for template in templates:
            texts = template._texts(candidate)
            values = None if texts is None else _convert(texts)
            if texts is not None and values is not None:
                ints = {k: int(v) for k, v in values.items() if k in INT_FIELDS}
                return _Found(ints, {k: v for k, v in texts.items() if k not in INT_FIELDS})
    fallback = {key: int(m[1]) for key, pattern in _FALLBACK if (m := pattern.search(name))}
    return _Found(fallback, {})


def _add_sidecar(found: _Found, path: Path, root: Path | None) -> None:
    text = _read_text(path, path.name, found.notes, root)
    values = parse_sidecar(_load_json(text, path.name, found.notes)) if text is not None else {}
    for key in ("epoch", "step"):
        number = values.pop(key, None)
        value = _as_int(number)
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
        if best.source != "filename" and _disagree(text, best.value):
            found.notes.append(
                f"filename {name} {text.strip()} disagrees with {best.source} {best.value:.10g}"
            )
    metrics = tuple(merged[k] for k in sorted(merged))
    ints = found.ints
    return MetricsResult(ints.get("epoch"), ints.get("step"), metrics, tuple(found.notes))


def _disagree(text: str, precise: float) -> bool:
    """Whether `precise` lies outside the rounding of the value written as `text`."""
    value = _to_float(text)
    if math.isnan(value) or math.isnan(precise) or math.isinf(value) or math.isinf(precise):
        return not (value == precise or (math.isnan(value) and math.isnan(precise)))
    m = re.search(r"(?:\.(\d*))?(?:[eE]([-+]?\d+))?\s*$", text)
    decimals = len(m[1] or "") if m else 0
    exponent = int(m[2]) if m and m[2] else 0
    half_unit = 0.5 * 10.0 ** max(min(exponent - decimals, 300), -300)
    tolerance = max(half_unit, 1.2e-7 * abs(value)) * (1 + 1e-9)  # float32 logs: ~1 ulp
    return abs(value - precise) > tolerance


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
