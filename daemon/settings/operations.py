"""The operator's keys of config.yaml: `service.metrics_listen` (where `ckpt serve` serves
`/metrics`) and `hooks:` (commands run on events). Checked here, refused with the key path."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError
from ..core.observability import HOOK_EVENTS
from .bounds import bounded as _number
from .values import mapping as _mapping

HOOK_KEYS = {"on", "command", "timeout"}
DEFAULT_HOOK_TIMEOUT = 30.0
MAX_HOOKS = 32
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Hook:
    """`hooks: [{on: [new_best, ...], command: [argv...], timeout: 30s}]`: argv, never a shell
    string, so no file name is ever parsed by a shell."""

    on: tuple[str, ...]
    command: tuple[str, ...]
    timeout: float = DEFAULT_HOOK_TIMEOUT


def metrics_listen(value: Any, key: str = "service.metrics_listen") -> Listen | None:
    """`127.0.0.1:9464`, `[::1]:9464`, `localhost:9464`; null or absent: no `/metrics`. Port 0:
    a free port, named in the `metrics_listening` log line (for tests)."""
    if value is None:
        return None
    why = "expected HOST:PORT, e.g. 127.0.0.1:9464 (a port from 0 to 65535)"
    if not isinstance(value, str):
        raise ConfigError(key, why)
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or len(port) > 5:
        raise ConfigError(key, f"{why}: got {value!r}")
    # The port's bounds; an option (`ckpt web --listen`) has those of the config key it overrides.
    _number(int(port), key, bounds_of=None if key.startswith("service.") else "service.web_listen")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(key, f"{why}: {host!r} is not an IPv6 address") from None
    elif not _HOST.fullmatch(host):
        raise ConfigError(key, f"{why}: got {value!r}")
    return Listen(host, int(port))


def hooks(value: Any, key: str = "hooks") -> tuple[Hook, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(key, "expected a list of {on: [events], command: [argv...]}")
    if len(value) > MAX_HOOKS:
        raise ConfigError(key, f"at most {MAX_HOOKS} hooks")
    return tuple(_hook(item, f"{key}[{i}]") for i, item in enumerate(value))


def _hook(item: Any, key: str) -> Hook:
    if isinstance(item, dict) and True in item and "on" not in item:
        # YAML 1.1 (PyYAML) reads a bare `on:` key as the boolean true: it is our `on`.
        item = {("on" if k is True else k): v for k, v in item.items()}
    raw = _mapping(item, key, HOOK_KEYS)
    on = raw.get("on")
    on = [on] if isinstance(on, str) else on
    if not isinstance(on, list) or not on:
        raise ConfigError(f"{key}.on", f"expected a list of events: {', '.join(HOOK_EVENTS)}")
    for i, name in enumerate(on):
        if name not in HOOK_EVENTS:
            raise ConfigError(
                f"{key}.on[{i}]", f"unknown event {name!r}: one of {', '.join(HOOK_EVENTS)}"
            )
    command = raw.get("command")
    if isinstance(command, str):
        raise ConfigError(
            f"{key}.command",
            "expected an argv list, e.g. [/usr/local/bin/notify, --channel, ml]: a shell "
            "string is refused (file names must never reach a shell)",
        )
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str) and a and "\0" not in a for a in command)
    ):
        raise ConfigError(f"{key}.command", "expected a non-empty list of non-empty strings")
    timeout = _number(raw.get("timeout", DEFAULT_HOOK_TIMEOUT), f"{key}.timeout")
    return Hook(tuple(dict.fromkeys(on)), tuple(command), timeout)


def node(value: Any, key: str = "service.node") -> str | None:
    """The daemon's node identity: printable, at most 256 characters; None: the host name."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise ConfigError(key, "expected a name of 1 to 256 characters, e.g. gpu-node-7")
    if not value.isprintable():
        raise ConfigError(key, "control characters are not allowed in a node name")
    return value
