"""Checks of single config values (durations, sizes, counts, paths, choices, mappings): each
returns the value or raises ConfigError naming the key path and the reason. Bounds live here
so that whatever `ckpt config check` accepts, `ckpt serve` can run with."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.root_names import check_name

if TYPE_CHECKING:
    from ..core.disk_guard import MinFree

# `ckpt status` calls a daemon dead after three missed heartbeats. A longer one would let it
# report a hung or vanished daemon (on another host, where no pid can be checked) as running; a
# sub-second one, which a busy worker cannot keep (and which writes the catalog non-stop),
# would let it report a live daemon as dead.
HEARTBEAT_RANGE_SECONDS = (1.0, 3600.0)


def every(value: Any, key: str) -> float:
    """A job's period: 0 turns it off; otherwise at least a second (a rescan every millisecond
    would keep a core busy walking the roots)."""
    seconds = duration(value, key)
    return seconds if seconds == 0 else at_least_a_second(seconds, key)


def at_least_a_second(value: Any, key: str) -> float:
    seconds = duration(value, key)
    if seconds < 1:
        raise ConfigError(key, f"must be at least 1s, got {seconds:g}s")
    return seconds


def heartbeat(value: Any) -> float:
    seconds = duration(value, "service.heartbeat")
    low, high = HEARTBEAT_RANGE_SECONDS
    if not low <= seconds <= high:
        raise ConfigError(
            "service.heartbeat",
            "must be between 1s and 1h: `ckpt status` judges a daemon dead after three missed "
            "beats",
        )
    return seconds


def lease_ttl(value: Any) -> float:
    """`service.lease_ttl`: a run's lease expires this long after its last renewal (every
    quarter of it while the work runs), so a dead holder's runs are taken over after it."""
    seconds = duration(value, "service.lease_ttl")
    if not 4 <= seconds <= 86400:
        raise ConfigError(
            "service.lease_ttl",
            "must be between 4s and 1d: it is renewed every quarter of it while work runs",
        )
    return seconds


def count(raw: Mapping[str, Any], name: str, key: str) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}.{name}", f"expected a whole number >= 1, got {value!r}")
    return value


def size(value: Any, key: str) -> int:
    from ..core.units import parse_size

    try:
        parsed = parse_size(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc
    if parsed <= 0:
        raise ConfigError(key, "must be more than 0")
    return parsed


def mapping(value: Any, key: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        where = "" if key == "(top level)" else f"{key}."
        raise ConfigError(
            f"{where}{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})"
        )
    return value


def strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(key, "expected a list of non-empty strings")
    return tuple(value)


def choice(value: Any, key: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def path(value: Any, key: str, base: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, "expected a path")
    if "\0" in value:
        raise ConfigError(key, "a path cannot hold a NUL character")
    return Path(os.path.abspath(base / os.path.expanduser(value)))


def duration(value: Any, key: str) -> float:
    from ..core.units import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def min_free(value: Any, key: str) -> MinFree:
    """The disk guard's threshold: a size (`20GB`) or a percentage of the filesystem (`10%`)."""
    from ..core.disk_guard import MinFree

    if isinstance(value, str) and value.strip().endswith("%"):
        number = value.strip()[:-1].strip()
        try:
            percent = float(number)
        except ValueError:
            raise ConfigError(key, f"{value!r} is not a percentage like 10%") from None
        if not 0 < percent < 100:
            raise ConfigError(key, f"a percentage above 0 and below 100, got {value!r}")
        return MinFree(percent=percent)
    return MinFree(bytes=size(value, key))


def root_name(value: Any, key: str) -> str:
    """A root's `name`: what the catalog stores its paths relative to (`core.root_names`)."""
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a name, got {type(value).__name__}")
    why = check_name(value)
    if why is not None:
        raise ConfigError(key, f"{value!r} {why}")
    return value
