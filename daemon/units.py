"""Durations (`90s`, `10m`, `2d`) and sizes (`50GB`, `1.5GiB`) as people write them. Pure."""

from __future__ import annotations

import re
import time

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(value: object) -> float:
    """Seconds from `30`, `30s`, `10m`, `2h`, `7d`, `1w`. Raises ValueError with the reason."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 10m, 2h or 7d")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration like 30s, 10m, 2h or 7d")
    number, unit = match.groups()
    return float(number) * _DURATION_SECONDS[unit or "s"]


def parse_size(value: object) -> int:
    """Bytes from `1024`, `50GB` (powers of 1000) or `50GiB` (powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError("expected a size like 500MB or 50GB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size like 500MB or 50GiB")
    number, unit = match.groups()
    unit = (unit or "").lower()
    base = 1024 if "i" in unit else 1000
    return int(float(number) * base ** _SIZE_POWERS[unit[:1] if unit[:1] != "b" else ""])


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def iso_utc(epoch_seconds: float) -> str:
    """ISO 8601 UTC with milliseconds and a Z: the one time format of the catalog and JSON."""
    whole = int(epoch_seconds // 1)
    millis = int((epoch_seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"
