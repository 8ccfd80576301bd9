"""Every numeric key of config.yaml and its bounds, and the one check they all go through:
`bounded(value, key)` parses the value as its kind (a duration, a whole number, a size, a
percentage, a port), refuses it outside its bounds with the key and the bounds, and returns it.
A key is looked up by its pattern (`roots[2].poll_interval` -> `roots[].poll_interval`; a policy
under a root or a `runs:` rule -> `retention.<key>`), so a numeric key without bounds cannot be
read at all (KeyError: a bug, found by tests/unit/test_config.py's walk of every key)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
MAX_DURATION = 36500 * DAY  # what `core.units.parse_duration` reads at most: 100 years
MAX_SIZE = 2**63 - 1
MAX_COUNT = 1_000_000  # checkpoints, epochs, hours, days or weeks: more is a typo


@dataclass(frozen=True)
class Bound:
    kind: str  # "duration" | "count" | "size" | "percent" | "port"
    low: float
    high: float
    off: bool = False  # 0 is allowed as well: it turns the thing off
    above: bool = False  # `low` itself is refused (a value above it)
    why: str = ""  # what the bounds protect, for the message


_JOB = Bound("duration", 1, MAX_DURATION, off=True, why="a job more often than every second")
_COUNT = Bound("count", 1, MAX_COUNT)
_AFTER = Bound("duration", 0, MAX_DURATION)
NUMERIC_KEYS: dict[str, tuple[Bound, ...]] = {
    "completion.settle_seconds": (Bound("duration", 0, DAY),),
    "completion.min_age_seconds": (Bound("duration", 0, HOUR),),
    "completion.abandoned_after": (
        Bound("duration", 1, 30 * DAY, why="a save in flight judged abandoned at once"),
    ),
    "completion.read_timeout": (
        Bound("duration", 1, HOUR, why="a sound read on a busy disk takes seconds"),
    ),
    **{f"schedule.{job}": (_JOB,) for job in ("rescan", "retention", "purge", "verify")},
    "schedule.artifacts": (_JOB,),
    "schedule.remote_verify": (_JOB,),
    "schedule.remote_sample": (Bound("count", 1, 100_000),),
    # APScheduler takes whole seconds (>= 1) here and refuses 0 when the job is added.
    "schedule.misfire_grace": (Bound("duration", 1, DAY),),
    "service.heartbeat": (
        Bound("duration", 1, HOUR, why="`ckpt status` judges a daemon dead after 3 missed beats"),
    ),
    "service.lease_ttl": (
        Bound("duration", 4, DAY, why="it is renewed every quarter of it while work runs"),
    ),
    "service.metrics_listen": (Bound("port", 0, 65535),),
    "service.web_listen": (Bound("port", 0, 65535),),
    # Each poll stats every entry of the tree: sub-second polling burns a core.
    "roots[].poll_interval": (Bound("duration", 1, DAY),),
    **{
        key: (
            Bound("size", 2**20, MAX_SIZE, why="a guard below 1 MiB guards nothing"),
            Bound("percent", 0.01, 99, why="of the filesystem"),
        )
        for key in ("min_free", "roots[].min_free")
    },
    # The free space our own copies leave to the trainers (core.space_reserve).
    "versions.reserve": (
        Bound("size", 2**20, MAX_SIZE, why="a reserve below 1 MiB leaves a trainer nothing"),
        Bound("percent", 0.01, 99, why="of the filesystem"),
    ),
    # All our kept copies of a filesystem together (core.space_reserve.budget_bytes).
    "versions.budget": (
        Bound("size", 0, MAX_SIZE, why="0: no copy is ever kept"),
        Bound("percent", 0.01, 99, why="of the space our copies may use"),
    ),
    **{f"retention.{k}": (_COUNT,) for k in ("keep_last", "keep_every", "keep_hourly")},
    **{f"retention.{k}": (_COUNT,) for k in ("keep_daily", "keep_weekly", "keep_best[].n")},
    "retention.keep_within": (Bound("duration", 1, MAX_DURATION),),
    "retention.max_bytes": (Bound("size", 1, MAX_SIZE),),
    "retention.tier_after": (_AFTER,),
    **{f"retention.keep_local.{k}": (_COUNT,) for k in ("last", "best")},
    "versions.keep_previous": (Bound("count", 1, 1000, why="each is a full copy of a file"),),
    "trash.purge_after": (_AFTER,),
    "artifacts.split_after": (_AFTER,),
    "artifacts.compress_after": (_AFTER,),
    # A child or a hook given less than 10 ms is killed before it has started.
    "artifacts.timeout": (Bound("duration", 0.01, 7 * DAY),),
    "hooks[].timeout": (Bound("duration", 0.01, HOUR),),
    # The checkpoint pipeline's stages (settings.pipeline).
    "pipeline[].timeout": (Bound("duration", 1, 7 * DAY, why="a stage child starts in seconds"),),
    "pipeline[].retries": (Bound("count", 0, 100),),
    "pipeline[].concurrency": (Bound("count", 1, 64),),
    "pipeline[].on.every": (_COUNT,),
    # `on: {final: QUIET}`: a run with no save and no writer this long has ended.
    "pipeline[].on.final": (Bound("duration", 1, 30 * DAY),),
}


def key_pattern(key: str) -> str:
    """`roots[0].retention.keep_best[1].n` -> `retention.keep_best[].n`."""
    pattern = re.sub(r"\[\d+\]", "[]", key)
    return re.sub(r"^(?:roots|runs)\[\]\.retention\.", "retention.", pattern)


def bounded(value: Any, key: str, kind: str | None = None, *, bounds_of: str | None = None) -> Any:
    """`value` of numeric key `key` parsed as its kind (`kind`: which, where a key takes two),
    within its bounds; else ConfigError naming the key and the bounds. `bounds_of`: the config
    key whose bounds apply, where `key` names a command-line option (`ckpt web --listen`)."""
    bounds = NUMERIC_KEYS[key_pattern(bounds_of or key)]
    bound = next(b for b in bounds if kind is None or b.kind == kind)
    number = _parse(bound.kind, value, key)
    low_ok = number > bound.low if bound.above else number >= bound.low
    if (low_ok and number <= bound.high) or (bound.off and number == 0):
        return number
    why = f" ({bound.why})" if bound.why else ""
    raise ConfigError(key, f"must be {describe(bound)}{why}, got {_shown(value)}")


def describe(bound: Bound) -> str:
    low, high = _text(bound.kind, bound.low), _text(bound.kind, bound.high)
    if bound.kind == "count":
        return f"a whole number from {low} to {high}"
    if bound.kind == "port":
        return f"a port from {low} to {high}"
    said = f"above {low} and at most {high}" if bound.above else f"between {low} and {high}"
    return f"0 (off) or {said}" if bound.off else said


def _parse(kind: str, value: Any, key: str) -> float:
    from ..core.units import parse_duration, parse_size

    if kind in ("count", "port"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected a whole number, got {_shown(value)}")
        return value
    if kind == "percent":
        number = float(value)
        if not math.isfinite(number):
            raise ConfigError(key, f"expected a percentage like 10%, got {_shown(value)}")
        return number
    try:
        return parse_duration(value) if kind == "duration" else parse_size(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def _text(kind: str, number: float) -> str:
    if kind == "duration":
        for unit, seconds in (("d", DAY), ("h", HOUR), ("m", MINUTE)):
            if number >= seconds and number % seconds == 0:
                return f"{number / seconds:g}{unit}"
        return f"{number:g}s"
    if kind == "size":
        return "2**63-1 bytes" if number == MAX_SIZE else _size_text(number)
    if kind == "percent":
        return f"{number:g}%"
    return f"{int(number):,}" if kind == "count" else str(int(number))


def _size_text(number: float) -> str:
    for unit, base in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if number >= base and number % base == 0:
            return f"{number / base:g} {unit}"
    return f"{number:g} byte" + ("" if number == 1 else "s")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} characters)"
