"""The catalog's one way in: `Store` opens the catalog (its engine never leaves the catalog
layer) and holds it as facets, each the reads and writes of one concern built from the engine:
`reads` (listings, best, latest, show, runs, heartbeats), `index` (the indexer's writes),
`claims` (read claims), `acts` (the writes of destructive acts), `recovery` (crash recovery),
`leases`, `runs` (run derivation), `versions` (kept versions), `usage` (bytes and figures),
`daemons` (heartbeat writes), `remote` (remote copies), `stage_jobs` (the pipeline's queue). A
use case takes the facets it uses, or `Acting` when it acts through the rail; only the
orchestrators hold the Store. Rows become `core.model` values (or the small frozen records of
those modules) before they leave."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from . import db
from .root_adoption import adopt_named_roots
from .store_actions import Acts
from .store_claims import Claims
from .store_daemons import Daemons
from .store_index import Index
from .store_leases import Leases
from .store_reads import Reads
from .store_recovery import Recovery
from .store_remote import RemoteCopies
from .store_runs import Runs
from .store_stage_jobs import StageJobs
from .store_usage import UsageReads
from .store_versions import Versions


class Store:
    """The catalog at `url`, created at head if new (a catalog behind head: SchemaBehind, exit
    5, unless `may_migrate`). Close it when done."""

    def __init__(
        self,
        url: str,
        *,
        may_migrate: bool = False,
        named_roots: Mapping[str, str] | None = None,
        node: str | None = None,
    ) -> None:
        """`named_roots`: `Config.named_roots()`; `node`: `Config.node_name` (None: the host
        name), written on every audit event."""
        self._engine = engine = db.make_engine(url)
        db.identify(engine, named_roots=named_roots, node=node)
        db.ensure_schema(url, engine, may_migrate=may_migrate)
        # A root named since its rows were written keeps them (and its history): {name: rows}.
        self.adopted = adopt_named_roots(engine, named_roots or {})
        # The hot reads: the fast path's own statements (`read_sql`), over this engine.
        self.reads = Reads(engine)
        self.index = Index(engine)
        self.claims = Claims(engine)
        self.acts = Acts(engine)
        self.recovery = Recovery(engine)
        self.leases = Leases(engine)
        self.runs = Runs(engine)
        self.versions = Versions(engine)
        self.usage = UsageReads(engine)
        self.daemons = Daemons(engine)
        self.remote = RemoteCopies(engine)
        self.stage_jobs = StageJobs(engine)

    def close(self) -> None:
        self._engine.dispose()


class Acting(Protocol):
    """The facets an act on a checkpoint's files touches (what `usecases.rail` needs: the run's
    lease, settling what a killed holder left planned, the re-check, the audit, the room for a
    copy, the remote copies it protects, the pipeline jobs waiting on a checkpoint it frees). A
    `Store` is one; the use cases that act through the rail take this, not the Store."""

    @property
    def reads(self) -> Reads: ...

    @property
    def index(self) -> Index: ...

    @property
    def acts(self) -> Acts: ...

    @property
    def recovery(self) -> Recovery: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def usage(self) -> UsageReads: ...

    @property
    def remote(self) -> RemoteCopies: ...

    @property
    def stage_jobs(self) -> StageJobs: ...
