"""The web view inside `ckpt serve`: started with the service when `service.web_listen` is set,
moved on a reload that changes it, stopped with the service. The view itself (`web`, above this
layer: it reads through the API) is handed in by the `ckpt serve` command as a function, so the
service never imports it, nor Jinja2 when the view is off."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from ..core.errors import ConfigError
from ..logs import event
from ..settings.config import Config


class Stoppable(Protocol):
    def stop(self) -> None: ...


StartWebView = Callable[[Config], Stoppable]


class WebHost:
    def __init__(self, start: StartWebView | None) -> None:
        self._start = start
        self._running: Stoppable | None = None

    def start(self, config: Config) -> None:
        """Refused with the key (exit 2 at start) when the address is taken or the token file
        cannot be read."""
        if config.web is None:
            return
        if self._start is None:
            raise ConfigError("service.web_listen", "this program has no web view to serve")
        try:
            self._running = self._start(config)
        except OSError as exc:
            why = f"cannot listen on {config.web.listen}: {exc}"
            raise ConfigError("service.web_listen", why) from exc

    def reload(self, old: Config, new: Config) -> None:
        if old.web == new.web:
            return
        self.stop()
        try:
            self.start(new)
        except ConfigError as exc:  # the new address is taken: no view until fixed
            event("web_refused", level=logging.ERROR, error=str(exc))

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()
            self._running = None
