"""Retention policies as the config gives them (`retention:` at the top, per root, and the
`runs:` rules), refused with the key and the reason when they are wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError
from ..core.retention import KeepBest, Policy
from ..core.tier_plan import KeepLocal
from .bounds import bounded as _number
from .values import choice as _choice
from .values import count as _count
from .values import mapping as _mapping


@dataclass(frozen=True)
class RunRule:
    """`runs: [{match: GLOB, retention: {...}}]`: a policy for the runs whose name matches."""

    match: str
    retention: Policy


POLICY_KEYS = {
    "keep_last",
    "keep_best",
    "keep_every",
    "keep_within",
    "keep_hourly",
    "keep_daily",
    "keep_weekly",
    "max_bytes",
    "tier_after",
    "keep_local",
}
KEEP_LOCAL_KEYS = {"last", "best"}
KEEP_BEST_KEYS = {"metric", "n", "mode", "keep_missing"}


def run_rules(value: Any) -> tuple[RunRule, ...]:
    if not isinstance(value, list):
        raise ConfigError("runs", "expected a list of {match: GLOB, retention: {...}}")
    rules = []
    for i, item in enumerate(value):
        raw = _mapping(item, f"runs[{i}]", {"match", "retention"})
        match = raw.get("match")
        if not isinstance(match, str) or not match:
            raise ConfigError(f"runs[{i}].match", "expected a glob over run names, e.g. 'exp-*'")
        if "retention" not in raw:
            raise ConfigError(f"runs[{i}].retention", "required")
        rules.append(RunRule(match, policy(raw["retention"], f"runs[{i}].retention")))
    return tuple(rules)


def policy(value: Any, key: str) -> Policy:
    raw = _mapping(value, key, POLICY_KEYS)
    best = raw.get("keep_best", [])
    best = [best] if isinstance(best, dict) else best
    if not isinstance(best, list):
        raise ConfigError(f"{key}.keep_best", "expected {metric, n, mode} or a list of them")
    policy = Policy(
        keep_last=_count(raw, "keep_last", key),
        keep_best=tuple(_keep_best(b, f"{key}.keep_best[{i}]") for i, b in enumerate(best)),
        keep_every=_count(raw, "keep_every", key),
        keep_within=_number(raw["keep_within"], f"{key}.keep_within")
        if "keep_within" in raw
        else None,
        keep_hourly=_count(raw, "keep_hourly", key),
        keep_daily=_count(raw, "keep_daily", key),
        keep_weekly=_count(raw, "keep_weekly", key),
        max_bytes=int(_number(raw["max_bytes"], f"{key}.max_bytes"))
        if "max_bytes" in raw
        else None,
        tier_after=_number(raw["tier_after"], f"{key}.tier_after") if "tier_after" in raw else None,
        keep_local=_keep_local(raw["keep_local"], f"{key}.keep_local")
        if "keep_local" in raw
        else None,
    )
    if policy.is_empty():
        raise ConfigError(key, "an empty policy keeps nothing: give at least one keep_ rule")
    if policy.keep_local and policy.keep_local.best and not policy.keep_best:
        raise ConfigError(
            f"{key}.keep_local.best", "needs a keep_best rule: the metric that says which is best"
        )
    return policy


def tiers(policy: Policy | None) -> bool:
    """The policy moves checkpoints to the object store by age or keeps some local."""
    return policy is not None and (policy.tier_after is not None or policy.keep_local is not None)


def _keep_local(value: Any, key: str) -> KeepLocal:
    raw = _mapping(value, key, KEEP_LOCAL_KEYS)
    return KeepLocal(last=_count(raw, "last", key), best=_count(raw, "best", key))


def _keep_best(value: Any, key: str) -> KeepBest:
    raw = _mapping(value, key, KEEP_BEST_KEYS)
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"{key}.metric", "required: the metric name, e.g. val_loss")
    mode = raw.get("mode")
    if mode is not None:
        _choice(mode, f"{key}.mode", ("min", "max"))
    keep_missing = raw.get("keep_missing", True)
    if not isinstance(keep_missing, bool):
        raise ConfigError(f"{key}.keep_missing", "expected true or false")
    n = _count(raw, "n", key) if "n" in raw else 1  # `{key}.n`: retention.keep_best[].n
    return KeepBest(metric=metric, n=n or 1, mode=mode, keep_missing=keep_missing)
