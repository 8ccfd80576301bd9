"""The Python API's object-storage half (`ckpt_daemon.api.Catalog`): where checkpoints' bytes
are, `tier` and `fetch`, `best` and `latest` answered from the store too. Each runs the use
case the `ckpt` command runs."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import NotFound
from ..core.model import Checkpoint
from ..usecases.tier import remote_answers
from ..usecases.tier.remote_answers import Answer
from .acts import CatalogActs, _actor

if TYPE_CHECKING:
    from ..usecases.tier.remote_trash import GiveUpReport
    from ..usecases.tier.tiering import TierReport
    from ..usecases.verifier import Verdict


class CatalogRemote(CatalogActs):
    def locations(self, found: Sequence[Checkpoint]) -> dict[int, tuple[str, str | None]]:
        """{id: (location, remote_url)} of these rows: where their bytes are (`local`,
        `remote`, `both`, `none`) and their verified remote copy's `s3://` URL. Without a
        `remote:` in the config, from the status alone (no Store opened)."""
        from ..usecases.tier.locations import locations

        return locations(self.config, lambda: self._store, found)

    def tier(
        self, refs: Sequence[str | int], *, dry_run: bool = False, actor: str | None = None
    ) -> TierReport:
        """Upload each checkpoint to its root's object store, verify the copy, record it, then
        move the local copy to the trash (`ckpt tier`)."""
        from ..usecases.tier.tiering import tier

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
        from ..usecases.tier.fetching import fetch

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
        from ..usecases.tier.remote_trash import give_up

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
        from ..usecases.tier.remote_verify import verify_remote

        return verify_remote(
            self.config, self._store, [self.ref(r) for r in refs], actor=actor or _actor()
        )

    def best_located(
        self,
        metric: str,
        mode: str | None = None,
        run: str | None = None,
        *,
        fetch: bool = False,
        versions: bool = False,
    ) -> Answer:
        """`best`, where a checkpoint whose bytes are only in the object store can be the answer
        (`location` `remote`, its `remote_url`); `fetch`: such an answer is brought back first
        (`fetch`) and answered with its local path (`ckpt best --fetch`). Without a `remote:`
        in the config, `best` as it is (location `local`)."""
        from ..core.query import default_mode

        chosen = mode or default_mode(metric)
        return self._located(
            lambda: self.best(metric, chosen, run, versions=versions),
            lambda store, local: remote_answers.best(store, local, metric, chosen, run),
            fetch,
        )

    def latest_located(
        self,
        run: str | None = None,
        resumable: bool = False,
        *,
        fetch: bool = False,
        versions: bool = False,
    ) -> Answer:
        """`latest`, where a checkpoint only in the object store can be the answer, further
        along than every local one (`ckpt latest --fetch`); as `best_located`."""
        return self._located(
            lambda: self.latest(run, resumable, versions=versions),
            lambda store, local: remote_answers.latest(store, local, run, resumable),
            fetch,
        )

    def _located(
        self,
        local: Callable[[], Checkpoint],
        anywhere: Callable[[Any, Callable[[], Checkpoint | None]], Answer | None],
        fetch: bool,
    ) -> Answer:
        from ..usecases.tier.locations import uses_remote

        if not uses_remote(self.config):
            return remote_answers.Answer(local(), "local", None)

        def local_or_none() -> Checkpoint | None:
            try:
                return local()
            except NotFound:
                return None

        answer = anywhere(self._store, local_or_none)
        if answer is None:
            local()  # its NotFound (or UsageError: an unknown metric) says why
            raise NotFound("no checkpoint found")
        if answer.location == "local":
            (place, url) = self.locations([answer.checkpoint])[answer.checkpoint.id]
            return remote_answers.Answer(answer.checkpoint, place, url)
        if not fetch:
            return answer
        path = self.fetch(answer.checkpoint.id)
        back = self.get(answer.checkpoint.id)
        assert str(path) == back.path
        return remote_answers.Answer(back, "both", answer.remote_url)
