"""`service.web_listen` and `service.web_token_file`: where `ckpt serve` serves its read-only web
view, and the token it asks for. Checked here, refused with the key path (exit 2): a view on an
address other hosts reach must not be readable by anyone who finds the port."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .operations import Listen, metrics_listen
from .values import path as _path

TOKEN_KEY = "service.web_token_file"
MAX_TOKEN_BYTES = 4096


@dataclass(frozen=True)
class WebView:
    listen: Listen
    token_file: Path | None = None  # None: no token asked (a loopback address only)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.listen.host)


def is_loopback(host: str) -> bool:
    """Only this host can reach it: `localhost` or a loopback IP. Any other name may resolve to
    an address other hosts reach, so it counts as open."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def web_view(service: Mapping[str, Any], base: Path) -> WebView | None:
    listen = metrics_listen(service.get("web_listen"), "service.web_listen")
    raw_token = service.get("web_token_file")
    token_file = None if raw_token is None else _path(raw_token, TOKEN_KEY, base)
    if listen is None:
        return None
    view = WebView(listen, token_file)
    if token_file is None and not view.loopback:
        raise ConfigError(
            TOKEN_KEY,
            f"required when service.web_listen ({listen}) is not a loopback address: a file "
            "holding the token every browser and script must send (127.0.0.1 needs none)",
        )
    return view


def read_token(view: WebView) -> str | None:
    """The token of `view.token_file` (surrounding whitespace dropped), None when none is asked.
    An unreadable, empty or huge file is refused with the key."""
    if view.token_file is None:
        return None
    try:
        data = view.token_file.read_bytes()[: MAX_TOKEN_BYTES + 1]
    except OSError as exc:
        raise ConfigError(TOKEN_KEY, f"cannot read {view.token_file}: {exc.strerror}") from exc
    token = data.decode("utf-8", "replace").strip()
    if not token or len(data) > MAX_TOKEN_BYTES:
        raise ConfigError(TOKEN_KEY, f"{view.token_file}: expected one token of 1 to 4096 bytes")
    return token
