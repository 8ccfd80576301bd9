"""Durations (`90s`, `10m`, `2d`) and sizes (`50GB`, `1.5GiB`) as people write them, catalog
times, and floats without float32 noise (`0.001`). Pure."""

from __future__ import annotations

import functools
import math
import re
import struct
import time

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


# Bounds that every consumer can take: clocks and timers (datetime, APScheduler, Event.wait)
# overflow somewhere past a few centuries, and a catalog integer column holds 64 bits. A NaN
# would compare false with everything (a settle time never reached, a heartbeat never stale).
MAX_DURATION_SECONDS = 100 * 365 * 86400.0
MAX_SIZE_BYTES = 2**63 - 1


def parse_duration(value: object) -> float:
    """Seconds from `30`, `30s`, `10m`, `2h`, `7d`, `1w`. Raises ValueError with the reason."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 10m, 2h or 7d")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration like 30s, 10m, 2h or 7d")
        number, unit = match.groups()
        seconds = float(number) * _DURATION_SECONDS[unit or "s"]
    if math.isnan(seconds):
        raise ValueError("expected a duration like 30s, 10m, 2h or 7d, got NaN")
    if seconds < 0:
        raise ValueError("must not be negative")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{_shown(value)} is more than 100 years (36500d)")
    return seconds


def format_duration(seconds: float) -> str:
    """`2d`, `36h`, `90m`, `45s`: the largest unit that shows the value whole."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def parse_size(value: object) -> int:
    """Bytes from `1024`, `50GB` (powers of 1000) or `50GiB` (powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError("expected a size like 500MB or 50GB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        size: float = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a size like 500MB or 50GiB")
        number, unit = match.groups()
        unit = (unit or "").lower()
        base = 1024 if "i" in unit else 1000
        size = float(number) * base ** _SIZE_POWERS[unit[:1] if unit[:1] != "b" else ""]
    if size > MAX_SIZE_BYTES:  # also catches a number too long for a float (inf)
        raise ValueError(f"{_shown(value)} is more than 2**63-1 bytes (9.2 EB)")
    return int(size)


def _shown(value: object) -> str:
    """A refused value in a one-line message: 400 digits are not worth repeating."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} characters)"


def counted(n: int, one: str, many: str | None = None) -> str:
    """`1 column`, `2 columns`: a count and its noun agreeing (`many`: an irregular plural)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


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
    """ISO 8601 UTC with milliseconds and a Z: the one time format of the catalog and JSON.

    A listing writes 100,000 of these (a tenth of `list --json` when each formatted its
    fields): the date is formatted once per day (`_utc_date`), the rest is looked up in tables
    of the texts of a day's minutes, a minute's seconds and a second's milliseconds (the same
    text as `strftime` of `gmtime`: a UTC day has 86,400 seconds, and floor division keeps
    times before 1970 on the right day)."""
    whole = int(epoch_seconds // 1)
    millis = int((epoch_seconds - whole) * 1000)  # 0 to 1000 (see _MILLIS)
    day, second = divmod(whole, 86400)
    minute, second = divmod(second, 60)
    return _utc_date(day) + _CLOCK_MINUTES[minute] + _TWO_DIGITS[second] + _MILLIS[millis]


_CLOCK_MINUTES = tuple(f"T{h:02d}:{m:02d}:" for h in range(24) for m in range(60))
_TWO_DIGITS = tuple(f"{n:02d}" for n in range(60))
# 1000 too: a time a hair before a whole second (-1e-49) leaves a fraction of 1.0 after floating
# point rounding; the definition (strftime, then the fraction) prints `.1000Z` for it too.
_MILLIS = tuple(f".{n:03d}Z" for n in range(1001))


@functools.lru_cache(maxsize=4096)
def _utc_date(day: int) -> str:
    """`YYYY-MM-DD` of the UTC day `day` days after 1970-01-01."""
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))


def shortest_float(value: float) -> str:
    """A float as the shortest decimal that reads back to it: Keras stores configs as float32,
    so a `0.001` comes back as 0.0010000000474974513; when `value` is exactly a float32, the
    shortest text that rounds to that same float32 is shown (`0.001`), else Python's repr."""
    if not math.isfinite(value) or value == 0:
        return repr(value)
    single = _as_float32(value)
    if single != value:  # a genuine float64 (or beyond float32's range): its own repr
        return repr(value)
    for digits in range(1, 10):  # 9 significant digits always round-trip a float32
        text = f"{value:.{digits}g}"
        if _as_float32(float(text)) == single:
            return repr(float(text))
    return repr(value)


def _as_float32(value: float) -> float:
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.inf


def short_time(iso: str | None) -> str:
    """`2026-12-01T08:19:19.250Z` as `2026-12-01T08:19:19Z`: the catalog's UTC time to the
    second, for a table column (JSON keeps the milliseconds)."""
    if not iso:
        return "-"
    head, dot, rest = iso.partition(".")
    if not dot:
        return iso
    zone = rest.lstrip("0123456789")
    return head + (zone or "")
