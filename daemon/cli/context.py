"""What every command receives: the global options, and the catalog and config they name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from .output import echo

if TYPE_CHECKING:
    from ..api import Catalog

MAX_LIMIT = 2**63 - 1  # what an SQL LIMIT takes


class Context:
    def __init__(self, config_path: str | None, database: str | None, debug: bool) -> None:
        self.config_path, self.database, self.debug = config_path, database, debug
        self._config: Any = None

    def catalog(self) -> Catalog:
        from ..api import open_catalog

        with self.new_catalog_notice():
            return open_catalog(self.config_path, self.database)

    def config(self) -> Any:
        """The config in use (loaded once); with --debug, one stderr line says which."""
        if self._config is None:
            from ..settings import config

            self._config = config.load(self.config_path, database_override=self.database)
            if self.debug:
                from ..settings.config import shown_url

                shown = shown_url(self._config.database)
                echo(f"ckpt: config {self._config.source}, catalog {shown}", err=True)
        return self._config

    @contextlib.contextmanager
    def new_catalog_notice(self, *, up_front: bool = False) -> Iterator[None]:
        """Say once (stderr) when what runs inside creates a new SQLite catalog: a command run
        from an unexpected folder otherwise quietly starts an empty one. `up_front`: the
        service runs for days, so it says so before it starts, not when it stops."""
        from ..settings.config import sqlite_file

        config = self.config()
        path = sqlite_file(config.database)
        path = None if path is None or path.exists() else path
        where = f"at {path} (config: {config.source})"
        if path is not None and up_front:
            echo(f"ckpt: creating a new catalog {where}", err=True)
        yield
        if path is not None and not up_front and path.exists():
            echo(f"ckpt: created a new catalog {where}", err=True)

    def validated_config(self, path: str | None) -> Any:
        """What `config check` accepts is what `serve` starts with: the file's validation, the
        catalog URL's (dialect, driver) and every root an existing folder, refused with the key
        path before anything runs."""
        from ..catalog import db as database
        from ..settings import config

        if path == self.config_path:
            loaded = self.config()
        else:
            loaded = config.load(path, database_override=self.database)
        database.check_url(loaded.database)
        config.require_roots(loaded)
        return loaded


pass_context = click.make_pass_decorator(Context)
