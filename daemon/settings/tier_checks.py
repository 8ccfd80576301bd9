"""The config's object-storage checks across sections: roots sharing a store keep distinct keys
(`remote.distinct_keys`), and a retention policy that tiers (`tier_after`, `keep_local`) has a
store to tier to: its root's `remote:` (a root's own policy), or at least one (a top-level
policy or a `runs:` rule, which cover every root; a root without a store keeps its checkpoints
local, and `ckpt prune --dry-run` says so)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..core.errors import ConfigError
from .policies import tiers
from .remote import distinct_keys


class Configured(Protocol):
    """What these checks read of a `settings.config.Config`."""

    @property
    def roots(self) -> Sequence[Any]: ...
    @property
    def retention(self) -> Any: ...
    @property
    def run_rules(self) -> Sequence[Any]: ...
    @property
    def remote(self) -> Any: ...
    def remote_for(self, root: Any) -> Any: ...


def check_remotes(config: Configured) -> None:
    distinct_keys([(config.remote_for(r), r.remote_name) for r in config.roots])
    for i, root in enumerate(config.roots):
        if tiers(root.retention) and config.remote_for(root) is None:
            raise ConfigError(
                f"roots[{i}].retention.{_tier_key(root.retention)}",
                "this root has no `remote:` (nor a top-level one): nothing to tier to",
            )
    shared = [("retention", config.retention)]
    shared += [(f"runs[{i}].retention", rule.retention) for i, rule in enumerate(config.run_rules)]
    if any(config.remote_for(r) is not None for r in config.roots):
        return
    for key, policy in shared:
        if tiers(policy):
            raise ConfigError(
                f"{key}.{_tier_key(policy)}", "no `remote:` is configured: nothing to tier to"
            )


def _tier_key(policy: Any) -> str:
    return "tier_after" if policy.tier_after is not None else "keep_local"
