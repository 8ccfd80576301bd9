"""Checks of single config values (numbers, paths, choices, mappings): each returns the value or
raises ConfigError naming the key path and the reason. Every numeric key goes through
`bounds.bounded` (its kind and bounds), so that whatever `ckpt config check` accepts, `ckpt
serve` can run with."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.root_names import check_name
from .bounds import bounded

if TYPE_CHECKING:
    from ..core.disk_guard import MinFree


def count(raw: Mapping[str, Any], name: str, key: str) -> int | None:
    """`raw[name]` as the whole number `{key}.{name}` (None: not given)."""
    value = raw.get(name)
    return None if value is None else int(bounded(value, f"{key}.{name}"))


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


def min_free(value: Any, key: str) -> MinFree:
    """The disk guard's threshold: a size (`20GB`) or a percentage of the filesystem (`10%`)."""
    from ..core.disk_guard import MinFree

    if isinstance(value, str) and value.strip().endswith("%"):
        text = value.strip()[:-1].strip()
        try:
            float(text)
        except ValueError:
            raise ConfigError(key, f"{value!r} is not a percentage like 10%") from None
        return MinFree(percent=bounded(text, key, "percent"))
    return MinFree(bytes=int(bounded(value, key, "size")))


def root_name(value: Any, key: str) -> str:
    """A root's `name`: what the catalog stores its paths relative to (`core.root_names`)."""
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a name, got {type(value).__name__}")
    why = check_name(value)
    if why is not None:
        raise ConfigError(key, f"{value!r} {why}")
    return value
