"""What every command receives: the global options, and the catalog and config they name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..api import Catalog

MAX_LIMIT = 2**63 - 1  # what an SQL LIMIT takes


class Context:
    def __init__(self, config_path: str | None, database: str | None, debug: bool) -> None:
        self.config_path, self.database, self.debug = config_path, database, debug

    def catalog(self) -> Catalog:
        from ..api import open_catalog

        return open_catalog(self.config_path, self.database)

    def config(self) -> Any:
        from ..settings import config

        return config.load(self.config_path, database_override=self.database)

    def validated_config(self, path: str | None) -> Any:
        """What `config check` accepts is what `serve` starts with: the file's validation and
        the catalog URL's (dialect, driver), refused with the key path before anything runs."""
        from ..catalog import db as database
        from ..settings import config

        loaded = config.load(path, database_override=self.database)
        database.check_url(loaded.database)
        return loaded


pass_context = click.make_pass_decorator(Context)
