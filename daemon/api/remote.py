"""The Python API's object-storage half (`ckpt_daemon.api.Catalog`): where checkpoints' bytes
are, `tier` and `fetch`. Each runs the use case the `ckpt` command runs."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.model import Checkpoint
from .acts import CatalogActs, _actor

if TYPE_CHECKING:
    from ..usecases.remote_trash import GiveUpReport
    from ..usecases.tiering import TierReport
    from ..usecases.verifier import Verdict


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

    def trash_remote(
        self, refs: Sequence[str | int], *, dry_run: bool = False, actor: str | None = None
    ) -> GiveUpReport:
        """Give up checkpoints' verified remote copies: each moved under its store's trash
        prefix (purged after trash.purge_after, `restore` puts it back); never the copy of a
        pinned, newest, best or last resumable checkpoint (`ckpt trash remote`)."""
        from ..usecases.remote_trash import give_up

        return give_up(
            self.config,
            self._store,
            [self.ref(r) for r in refs],
            dry_run=dry_run,
            actor=actor or _actor(),
        )

    def verify_remote(
        self, refs: Sequence[str | int] = (), *, actor: str | None = None
    ) -> builtins.list[Verdict]:
        """Read back each verified remote copy (of `refs`; none: all): size, the service's
        checksum, our metadata hash. One found changed or missing is marked, never trusted
        again (`ckpt verify --remote`)."""
        from ..usecases.remote_verify import verify_remote

        return verify_remote(
            self.config, self._store, [self.ref(r) for r in refs], actor=actor or _actor()
        )
