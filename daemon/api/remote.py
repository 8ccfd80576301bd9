"""The Python API's object-storage half (`ckpt_daemon.api.Catalog`): where checkpoints' bytes
are, `tier` and `fetch`. Each runs the use case the `ckpt` command runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.model import Checkpoint
from .acts import CatalogActs, _actor

if TYPE_CHECKING:
    from ..usecases.tiering import TierReport


class CatalogRemote(CatalogActs):
    def locations(self, found: Sequence[Checkpoint]) -> dict[int, tuple[str, str | None]]:
        """{id: (location, remote_url)} of these rows: where their bytes are (`local`,
        `remote`, `both`, `none`) and their verified remote copy's `s3://` URL. Without a
        `remote:` in the config, from the status alone (no Store opened)."""
        from ..usecases.locations import locations

        return locations(self.config, lambda: self._store, found)

    def tier(
        self, refs: Sequence[str | int], *, dry_run: bool = False, actor: str | None = None
    ) -> TierReport:
        """Upload each checkpoint to its root's object store, verify the copy, record it, then
        move the local copy to the trash (`ckpt tier`)."""
        from ..usecases.tiering import tier

        return tier(
            self.config,
            self._store,
            [self.ref(r) for r in refs],
            dry_run=dry_run,
            actor=actor or _actor(),
        )

    def fetch(
        self, ref: str | int, *, to: str | Path | None = None, actor: str | None = None
    ) -> Path:
        """Bring a checkpoint's bytes back from its remote copy, verified against the catalog's
        hash, to its own path (or `to`): the local path (`ckpt fetch`)."""
        from ..usecases.fetching import fetch

        return fetch(
            self.config,
            self._store,
            self.ref(ref),
            to=Path(to) if to is not None else None,
            actor=actor or _actor(),
        )
