"""The `versions:` section of config.yaml: keeping the generations of files rewritten in place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.disk_guard import MinFree
from ..core.errors import ConfigError
from ..core.space_reserve import DEFAULT_BUDGET, DEFAULT_RESERVE
from ..core.versions import CAPTURE_MODES
from .values import choice, count, mapping, min_free

VERSIONS_KEYS = {"budget", "capture", "keep_previous", "metric", "reserve"}


@dataclass(frozen=True)
class Versions:
    """How versions are captured and, for runs without a retention policy, kept."""

    capture: str = "fixed_names"
    keep_previous: int = 1  # the newest N kept generations of each file, always
    metric: str | None = None  # keep_best's metric for versions (None: val_loss, else loss)
    # Free space our copies always leave to the trainers (core.space_reserve), at least the
    # biggest checkpoint of the filesystem.
    reserve: MinFree = DEFAULT_RESERVE
    # All kept copies of a filesystem together: a size, or a percentage of the space they may
    # use (free space plus their own bytes); the oldest, least valuable ones give way first.
    budget: MinFree = DEFAULT_BUDGET


def parse_versions(value: Any) -> Versions:
    raw = mapping(value, "versions", VERSIONS_KEYS)
    capture = choice(raw.get("capture", "fixed_names"), "versions.capture", CAPTURE_MODES)
    keep_previous = count(raw, "keep_previous", "versions")
    metric = raw.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        raise ConfigError("versions.metric", "expected a metric name, e.g. val_loss")
    reserve = min_free(raw["reserve"], "versions.reserve") if "reserve" in raw else DEFAULT_RESERVE
    budget = min_free(raw["budget"], "versions.budget") if "budget" in raw else DEFAULT_BUDGET
    previous = 1 if keep_previous is None else keep_previous
    return Versions(capture, previous, metric, reserve, budget)
