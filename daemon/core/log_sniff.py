"""What a training log looks like, judged from names and a file's first bytes (pure).

CSVLogger files are recognised by content under any name: a header with an `epoch` column and
at least one other, then rows of numbers. JSON logs are what `metrics.parse_metrics_file`
accepts, or JSON lines (one record a line with an `epoch` or `step` key). Checkpoints, their
`<checkpoint>.json` sidecars and Keras's `BackupAndRestore` metadata are never logs.
"""

from __future__ import annotations

import csv
import json
import re

from .training_metrics import ByKey, as_int, parse_metrics_file

SNIFF_BYTES = 4096  # of a candidate file, enough for a CSVLogger header and several rows
SEPARATORS = (",", ";", "\t")
MAX_COLUMN_CHARS = 200
_CHECKPOINT_SUFFIX = re.compile(
    r".*(?:\.(?:h5|hdf5|keras|index|pb|ckpt|pt|pth|safetensors|npz|msgpack|tflite)"
    r"|\.data-\d+-of-\d+)",
    re.IGNORECASE,
)
_SIDECAR = re.compile(r".*\.(?:h5|hdf5|keras|index|ckpt)\.json", re.IGNORECASE)
NOT_LOGS = frozenset({"training_metadata.json"})  # BackupAndRestore's own bookkeeping
_NA_CELLS = frozenset({"", "NA", "nan", "NaN"})


def looks_like_checkpoint(name: str) -> bool:
    return bool(_CHECKPOINT_SUFFIX.fullmatch(name))


def is_json_log_name(name: str) -> bool:
    """`*.json` / `*.jsonl` that may be a log: not a checkpoint's sidecar, not Keras metadata."""
    lower = name.lower()
    if not lower.endswith((".json", ".jsonl")) or lower in NOT_LOGS:
        return False
    return not _SIDECAR.fullmatch(name)


def csv_log_separator(head: bytes, complete: bool) -> str | None:
    """The separator of a CSVLogger-style log whose first bytes are `head` (`complete`: the
    whole file), or None when it is not one: binary, no `epoch` column, a non-numeric row."""
    if b"\x00" in head:
        return None
    if not complete:  # the last line may be cut, even inside a UTF-8 sequence
        cut = max(head.rfind(b"\n"), head.rfind(b"\r"))
        if cut < 0:
            return None
        head = head[: cut + 1]
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    if not lines:
        return None
    sep = next((s for s in SEPARATORS if s in lines[0]), None)
    if sep is None:
        return None
    try:
        rows = [[c.strip() for c in row] for row in csv.reader(lines, delimiter=sep)]
    except csv.Error:
        return None
    header = rows[0]
    if not _is_header(header):
        return None
    data = [row for row in rows[1:] if row and row != header]
    if not data:
        return None
    epoch_at = header.index("epoch")
    for row in data:
        if len(row) != len(header) or as_int(row[epoch_at]) is None:
            return None
        if not all(_numeric_or_na(cell) for cell in row):
            return None
    return sep


def _is_header(cells: list[str]) -> bool:
    if "epoch" not in cells or len(cells) < 2 or len(set(cells)) != len(cells):
        return False
    return all(c and len(c) <= MAX_COLUMN_CHARS and c.isprintable() for c in cells)


def _numeric_or_na(cell: str) -> bool:
    if cell in _NA_CELLS:
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def parse_json_log(text: str, lines: bool) -> tuple[ByKey, ByKey, str | None]:
    """(by 1-based epoch, by step, problem) of a JSON log (`lines`: JSON lines). A JSON lines
    file's unparsable lines are skipped (a live writer's last line may be cut)."""
    if not lines:
        try:
            obj: object = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return {}, {}, f"invalid JSON ({str(exc).splitlines()[0][:80]})"
        by_epoch, by_step = parse_metrics_file(obj)
        return by_epoch, by_step, None
    records: list[object] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(record, dict) and ("epoch" in record or "step" in record):
            records.append(record)
    by_epoch, by_step = parse_metrics_file(records)
    return by_epoch, by_step, f"{bad} lines are not JSON, skipped" if bad else None
