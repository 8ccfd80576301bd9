"""The Python API for scripts: the same operations as the `ckpt` command, returning plain values.

from daemon.api import open_catalog
with open_catalog() as cat:
    best = cat.best("val_loss")                      # a daemon.model.Checkpoint
    recent = cat.list(run="exp1", where=["epoch >= 10"], sort="val_loss", limit=5)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from daemon import config as config_module
from daemon.config import Config
from daemon.model import Checkpoint, Run
from daemon.query import Condition, ListQuery, default_mode, parse_condition

if TYPE_CHECKING:
    from daemon.indexer import ScanReport
    from daemon.store import Store


class Catalog:
    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self._store = store

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    def list(
        self,
        run: str | None = None,
        where: Iterable[str | Condition] = (),
        sort: str = "mtime",
        desc: bool = False,
        limit: int | None = None,
        format: str | None = None,
        status: str | None = None,
        kind: str | None = None,
    ) -> builtins.list[Checkpoint]:
        """Checkpoints matching every filter; `where` items are "NAME OP VALUE" strings."""
        conditions = tuple(c if isinstance(c, Condition) else parse_condition(c) for c in where)
        query = ListQuery(
            run=run,
            format=format,
            status=status,
            kind=kind,
            where=conditions,
            sort=sort,
            descending=desc,
            limit=limit,
        )
        return self._store.list(query)

    def best(self, metric: str, mode: str | None = None, run: str | None = None) -> Checkpoint:
        """The `ok` checkpoint with the best value of `metric` (mode as Keras's "auto")."""
        return self._store.best(metric, mode or default_mode(metric), run)

    def get(self, ref: str | int) -> Checkpoint:
        """By catalog id or path; the result's `details` has layers, configs and events."""
        return self._store.get(str(ref))

    def runs(self) -> builtins.list[Run]:
        return self._store.runs()

    def status(self) -> dict[str, Any]:
        """The daemon's health from its last heartbeat, in the `status --json` shape."""
        from daemon.health import daemon_status

        return daemon_status(self._store.latest_heartbeat(), self._store.count())

    def scan(
        self,
        paths: Sequence[str | Path] = (),
        *,
        actor: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> ScanReport:
        """Index now: the given files/folders (inside configured roots), or every root."""
        from daemon.indexer import scan
        from daemon.store import actor as default_actor

        return scan(
            self.config,
            self._store,
            [Path(p) for p in paths],
            actor=actor or default_actor(),
            progress=progress,
        )


def open_catalog(
    config_path: str | None = None, database: str | None = None, *, may_migrate: bool = False
) -> Catalog:
    """Open the catalog named by `database`, $CKPT_DB or the config (created at head if new)."""
    from daemon.store import Store

    config = config_module.load(config_path, database_override=database)
    return Catalog(config, Store(config.database, may_migrate=may_migrate))
