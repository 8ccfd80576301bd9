"""What every command receives: the global options, and the catalog and config they name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.errors import UsageError
from .output import echo

if TYPE_CHECKING:
    from ..api import Catalog
    from ..settings.config import Config

MAX_LIMIT = 2**63 - 1  # what an SQL LIMIT takes


class Context:
    def __init__(self, config_path: str | None, database: str | None, debug: bool) -> None:
        self.config_path, self.database, self.debug = config_path, database, debug
        self._config: Config | None = None

    def catalog(self, *, create: bool = False) -> Catalog:
        """The catalog of the config in use. Only `create` (`ckpt scan`) makes a new SQLite
        catalog: any other command with none there is a usage error that says which config and
        catalog it looked at (a command run from an unexpected folder must not answer from a
        new, empty catalog)."""
        from ..api import open_catalog

        if not create:
            self.require_catalog()
        with self.new_catalog_notice():
            return open_catalog(self.config_path, self.database)

    def shown(self, path: str | Path) -> str:
        """A path as every line for a person prints it: relative to its configured root (as
        `ckpt list` prints it; every REF takes this form back from any folder), else as it is.
        `--json` has the absolute path."""
        from ..core.text import relative_path

        roots = sorted((str(r.path) for r in self.config().roots), key=len, reverse=True)
        return relative_path(str(path), roots)

    def missing_catalog(self) -> Path | None:
        """The SQLite file the config names, when it does not exist (None: it exists, or the
        catalog is not an SQLite file)."""
        from ..settings.config import sqlite_file

        path = sqlite_file(self.config().database)
        return path if path is not None and not path.exists() else None

    def require_catalog(self) -> None:
        path = self.missing_catalog()
        if path is None:
            return
        from ..catalog import db

        db.check_url(self.config().database)  # a bad URL is said as such, first
        db.check_options(self.config().database)
        from ..settings import locations
        from ..settings.config import BUILT_IN

        source = self.config().source
        if source == BUILT_IN:
            looked = ", ".join(locations.looked_at(self.config_path))
            config = f"no config file found (looked at {looked}), so the built-in default's"
        else:
            config = f"the catalog of config {source}"
        raise UsageError(
            f"no catalog at {path} ({config}): point at your daemon's config with --config "
            "PATH or $CKPT_CONFIG (`ckpt status` beside it says which it uses), or create "
            "this catalog with `ckpt scan`"
        )

    def config(self) -> Config:
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
        path = self.missing_catalog()
        where = f"at {path} (config: {self.config().source})"
        if path is not None and up_front:
            echo(f"ckpt: creating a new catalog {where}", err=True)
        yield
        if path is not None and not up_front and path.exists():
            echo(f"ckpt: created a new catalog {where}", err=True)

    def validated_config(self, path: str | None) -> Config:
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
