"""Epoch, step and metric values for a checkpoint.

Sources, highest precedence first: a sidecar `<checkpoint>.json`, `metrics.json`-style files,
CSVLogger files, and the values Keras's ModelCheckpoint wrote into the file name. Pure parsing of
texts and names; `formats.metric_files` reads the files and joins the sources.
"""

from __future__ import annotations

import io
import math
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache

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
        return {k: int(v) if k in INT_FIELDS else to_float(v) for k, v in texts.items()}
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


def to_float(text: str) -> float:
    s = text.strip()
    m = re.fullmatch(r"([-+]?)0*((?i:nan|inf))", s)
    return float(m[1] + m[2]) if m else float(s)


def as_int(value: object) -> int | None:
    """An integral JSON number or a decimal string (CSV cell, JSON key) as int, else None."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_float(value: object) -> float | None:
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
    import csv  # here: `ckpt best` and `list` parse no log, and start faster without it

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
    epoch = as_int(row[header.index("epoch")])
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
    pairs = ((k, as_float(v)) for k, v in obj.items() if isinstance(k, str) and _is_name(k))
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
        items = [(as_int(k), v) for k, v in obj.items()]
    elif isinstance(obj, list):
        items = [(as_int(r.get(key_name)), r) for r in obj if isinstance(r, dict)]
    out: ByKey = {}
    for key, record in items:
        values = {k: v for k, v in parse_sidecar(record).items() if k not in INT_FIELDS}
        if key is not None and values:
            out.setdefault(key, {}).update(values)
    return out


def disagrees(text: str, precise: float) -> bool:
    """Whether `precise` lies outside the rounding of the value written as `text`."""
    value = to_float(text)
    if math.isnan(value) or math.isnan(precise) or math.isinf(value) or math.isinf(precise):
        return not (value == precise or (math.isnan(value) and math.isnan(precise)))
    m = re.search(r"(?:\.(\d*))?(?:[eE]([-+]?\d+))?\s*$", text)
    decimals = len(m[1] or "") if m else 0
    exponent = int(m[2]) if m and m[2] else 0
    half_unit = 0.5 * 10.0 ** max(min(exponent - decimals, 300), -300)
    tolerance = max(half_unit, 1.2e-7 * abs(value)) * (1 + 1e-9)  # float32 logs: ~1 ulp
    return abs(value - precise) > tolerance
