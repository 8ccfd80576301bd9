"""The Python API's reads (`ckpt_daemon.api.Catalog`'s half that changes nothing): listing,
best, latest, one checkpoint, runs, history, disk usage, the trash, the audit log, the daemon's
health; and the catalog it reads, opened on first use."""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from ..core.errors import NotFound, UsageError
from ..core.model import Checkpoint, CheckpointStatus, Format, Kind, Run
from ..core.query import (
    Condition,
    ListQuery,
    default_mode,
    metric_keys,
    parse_condition,
    unknown_key,
)
from ..settings.config import Config

if TYPE_CHECKING:
    from ..catalog.dbapi_reads import DbapiReads
    from ..catalog.store import Store
    from ..core.history import History
    from ..core.usage import RootUsage
    from ..core.wait_match import WaitFor


class CatalogReads:
    """What a script reads of the catalog. `Catalog` adds the acts (`api.acts`)."""

    def __init__(
        self,
        config: Config,
        store: Store | None = None,
        *,
        reads: DbapiReads | None = None,
        may_migrate: bool = False,
    ) -> None:
        self.config = config
        self._opened = store
        self._reads = reads  # the hot reads, without SQLAlchemy (`open_catalog`)
        self._may_migrate = may_migrate

    @property
    def _store(self) -> Store:
        """The catalog's Store, opened on first use: `best`, `latest`, `list` and `status` on a
        local SQLite or a plain PostgreSQL catalog are answered by `_reads` and never import
        SQLAlchemy."""
        if self._opened is None:
            from ..catalog.store import Store

            self._opened = Store(
                self.config.database,
                may_migrate=self._may_migrate,
                named_roots=self.config.named_roots(),
                node=self.config.node_name,
            )
        return self._opened

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()
        if self._reads is not None:
            self._reads.close()

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
        versions: bool = False,
        every_row: bool = False,
        location: str | None = None,
    ) -> builtins.list[Checkpoint]:
        """Checkpoints matching every filter; `where` items are "NAME OP VALUE" strings. The
        checkpoints themselves: without `status`, not the rows of files trashed, purged or
        removed by their trainer; without `versions`, not the kept versions of rewritten files
        (each file's `versions_kept` counts them; `versions=True` lists them as rows too).
        `every_row`: versions and the rows of files no longer on disk too (all but standby).
        `location`: only checkpoints whose bytes are there (local, remote, both, none), every
        row considered (a tiered checkpoint's local copy is in the trash). With a `remote:`,
        the checkpoints only in the object store (tiered) are listed too: a checkpoint whose
        verified copy is in the store is still a checkpoint (`locations` says where)."""
        if location is not None:
            from ..usecases.tier.locations import filtered

            every = self.list(run, where, sort, desc, None, format, status, kind, versions, True)
            return filtered(self._store.remote, every, location, limit)
        if status is None and not every_row:
            from ..usecases.tier.locations import uses_remote

            if uses_remote(self.config):
                from ..usecases.tier.locations import with_tiered

                every = self.list(run, where, sort, desc, None, format, None, kind, versions, True)
                rows = [c for c in every if versions or c.version_of is None]
                return with_tiered(self._store.remote, rows, limit)
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
            versions=versions or every_row or status is not None,  # a status: every row of it
            off_disk=every_row,
        )
        for option, value, known in (
            ("--status", status, CheckpointStatus),
            ("--format", format, Format),
            ("--kind", kind, Kind),
        ):
            if value is not None and value not in {v.value for v in known}:
                names = ", ".join(v.value for v in known)
                raise UsageError(f"{option} {value!r}: not one of {names}")
        source = self._reads or self._store.reads
        for what, key in metric_keys(query):
            if not source.has_metric(key):
                raise UsageError(unknown_key(what, source.metric_names()))
        found = source.list(query)
        counts = source.version_counts([c.path for c in found if c.version_of is None])
        if not counts:
            return found
        # Only the files with kept versions are copied (0 is every other row's value already).
        return [
            dataclasses.replace(c, versions_kept=counts[c.path]) if c.path in counts else c
            for c in found
        ]

    def best(
        self,
        metric: str,
        mode: str | None = None,
        run: str | None = None,
        *,
        versions: bool = False,
    ) -> Checkpoint:
        """The `ok` checkpoint with the best value of `metric` (mode as Keras's "auto") whose
        files are unchanged since indexed (a changed one is skipped for the next). UsageError
        when no checkpoint in the catalog has `metric` (a typo), naming the metrics there.
        Our kept copies of rewritten files (`.ckpt-versions`) are answers only with
        `versions`: they are no training moment of their own."""
        source = self._reads or self._store.reads
        try:
            return source.best(metric, mode or default_mode(metric), run, versions=versions)
        except NotFound:
            self.check_metric("--metric", metric)
            raise

    def latest(
        self, run: str | None = None, resumable: bool = False, *, versions: bool = False
    ) -> Checkpoint:
        """The newest `ok` checkpoint of `run` (and the runs below it): the most training
        progress (optimizer iterations, then epoch, step, mtime). `resumable`: only one that can
        resume training (optimizer state that its loader restores: `core.resume`). Its files are
        stat'ed first: one changed since indexed is skipped for the next. `details` holds
        `resumable`, `resume_reason`, `keras_version`, `iterations` and `skipped` (changed
        candidates passed over). Without `run` the catalog must hold one run with ok
        checkpoints (else UsageError). NotFound when there is none. Our kept copies of
        rewritten files are answers only with `versions`."""
        return (self._reads or self._store.reads).latest(run, resumable, versions=versions)

    def metric_names(self) -> set[str]:
        """Every metric name any checkpoint in the catalog has."""
        return (self._reads or self._store.reads).metric_names()

    def check_metric(self, what: str, metric: str) -> None:
        """UsageError naming the catalog's metrics when no checkpoint has `metric` (a typo in
        option `what`)."""
        source = self._reads or self._store.reads
        if not source.has_metric(metric):
            raise UsageError(
                unknown_key(f"{what} {metric!r}", source.metric_names(), columns=False)
            )

    def ref(self, ref: str | int) -> str:
        """A REF as the catalog knows it: an id as it is, a path absolute. A relative path is
        read as every command prints one: relative to the working folder when a file is there
        inside a root, else relative to the root that holds it (`ckpt list` prints paths
        relative to their root), so any printed form can be pasted from any folder."""
        text = str(ref)
        if not text or (text.isascii() and text.isdigit()) or os.path.isabs(text):
            return text
        here = os.path.abspath(text)
        if os.path.lexists(here) and self.config.root_for(Path(here)) is not None:
            return here
        in_roots = [os.path.normpath(os.path.join(r.path, text)) for r in self.config.roots]
        inside = [p for p in in_roots if self.config.root_for(Path(p)) is not None]
        existing = [p for p in inside if os.path.lexists(p)]
        if existing:
            return existing[0]
        # Gone from the disk (trashed, missing): the first form the catalog has a row of.
        candidates = [here] if self.config.root_for(Path(here)) is not None else []
        for candidate in dict.fromkeys([*candidates, *inside]):
            try:
                self._store.reads.get(candidate)
            except NotFound:
                continue
            return candidate
        return here

    def get(self, ref: str | int) -> Checkpoint:
        """By catalog id or path; the result's `details` has layers, configs and events (and,
        for an adapter, `base_model`: its lineage, `usecases.lineage`)."""
        from ..usecases.lineage import with_lineage

        return with_lineage(self.config, self._store.reads, self._store.reads.get(self.ref(ref)))

    def wait(
        self,
        run: str,
        *,
        newer_than: int | None = None,
        after: str | int | None = None,
        metric: str | None = None,
        better_than: float | None = None,
        mode: str | None = None,
        timeout: float = 1800.0,
        recheck: float = 5.0,
    ) -> Checkpoint:
        """Block until a new complete (`ok`) checkpoint of `run` (and the runs below it) is in
        the catalog, and return it: past step `newer_than`, or past the checkpoint `after`
        names, or (neither) not in the catalog when the wait began; with `metric`, one that
        has it (better than `better_than`, `mode` as `best`'s). Wakes on the catalog's change
        (PostgreSQL LISTEN/NOTIFY, inotify on an SQLite file), not a busy poll. NotFound
        after `timeout` seconds; `recheck`: a look every so many seconds even without a change
        (an event lost). `ckpt wait` is this call."""
        from ..catalog import db
        from ..core.wait_match import WaitFor
        from ..service import catalog_wait

        if newer_than is not None and after is not None:
            raise UsageError("--newer-than and --after: give one of them")
        if better_than is not None and metric is None:
            raise UsageError("--better-than needs --metric")
        url = self.config.database
        sqlite_file = db.sqlite_path(url) if db.is_sqlite(url) else None
        check = catalog_wait.SqliteFileCheck(sqlite_file) if sqlite_file else lambda: None
        asked: builtins.list[WaitFor] = []  # the wait, once built from the first look

        def rows() -> builtins.list[Checkpoint]:
            # A copy we keep of a rewritten file is no new save of the trainer's (issue 39).
            found = self.list(run=run, status=CheckpointStatus.OK.value)
            found = [c for c in found if c.version_of is None]
            return self._integrity_pending(found, asked[0]) if asked else found

        try:
            waker = catalog_wait.waker_for(url, sqlite_file)
            try:
                seen = frozenset((c.id, c.generation) for c in rows())
                wanted = WaitFor(
                    run=run,
                    newer_than=newer_than,
                    after=self.get(after) if after is not None else None,
                    metric=metric,
                    better_than=better_than,
                    mode=mode or (default_mode(metric) if metric else "min"),
                    seen=seen if newer_than is None and after is None else frozenset(),
                )
            except BaseException:
                waker.close()
                raise
            asked.append(wanted)
            return catalog_wait.wait_for(wanted, rows, waker, timeout, recheck, check)
        except Exception:
            check()  # a read failed because the catalog went away meanwhile: say that
            raise

    def _integrity_pending(
        self, rows: builtins.list[Checkpoint], wanted: WaitFor
    ) -> builtins.list[Checkpoint]:
        """`rows`, the new ones whose integrity verdict is still to come marked so
        (`core.health.PENDING`): due to an integrity stage of the config, none recorded yet,
        and their integrity job not ended without one (failed, cancelled, skipped)."""
        from ..core import health
        from ..core.pipeline import OPEN_STATES
        from ..core.wait_match import is_new

        stages = [s for s in self.config.pipeline if s.uses == "integrity"]
        if not stages:
            return rows
        names = {s.name for s in stages}
        marked = []
        for row in rows:
            if is_new(row, wanted) and health.awaits_verdict(stages, row):
                ended = [
                    j
                    for j in self._store.stage_jobs.list(checkpoint_id=row.id)
                    if j.stage in names and j.generation == row.hash and j.state not in OPEN_STATES
                ]
                if not ended:
                    row = dataclasses.replace(row, details={**row.details, health.PENDING: True})
            marked.append(row)
        return marked

    def runs(self) -> builtins.list[Run]:
        """Each run: its checkpoints' count and bytes on the local disk, its newest and its best
        per metric (with a `remote:`, a checkpoint only in the object store can be either)."""
        from ..usecases.tier.locations import uses_remote

        found = self._store.reads.runs()
        if not uses_remote(self.config):
            return found
        from ..usecases.tier import remote_answers

        return remote_answers.runs(self._store.reads, self._store.remote, found)

    def history(self, run: str, metrics: Sequence[str] = ()) -> History:
        """A run's metrics per epoch (its logs and its checkpoints) with every checkpoint
        marked: kept, best (per metric), pinned, trashed, version, missing (`ckpt history`)."""
        from ..usecases.history import run_history

        return run_history(self.config, self._store.reads, self._store.runs, run, metrics)

    def du(self) -> builtins.list[RootUsage]:
        """Bytes per root, run and kind (checkpoint, inference, version, trash), biggest
        first, from the catalog alone (`ckpt du`)."""
        from ..usecases.history import disk_usage

        return disk_usage(self._store.usage, self._store.remote)

    def trash(self) -> builtins.list[dict[str, Any]]:
        """Trashed checkpoints: original and trash paths, bytes, when and why; then the remote
        copies in their stores' trash (`location: remote`, `remote_url`, `trash_url`)."""
        from ..core.views import trashed_json
        from ..usecases.tier.locations import uses_remote

        found = [trashed_json(t) for t in self._store.acts.trashed()]
        if uses_remote(self.config):
            from ..usecases.tier.remote_trash import trashed

            found += [
                trashed_json(t) for t in trashed(self.config, self._store.reads, self._store.remote)
            ]
        return found

    def log(
        self,
        run: str | None = None,
        limit: int | None = None,
        *,
        action: str | None = None,
        state: str | None = None,
        actor: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """The audit events, oldest first (the newest `limit` of them); `action`, `state`,
        `actor`: only the events with that value."""
        from ..core.views import event_json

        found = self._store.acts.audit_log(run, limit, action=action, state=state, actor=actor)
        return [event_json(e) for e in found]

    def status(self) -> dict[str, Any]:
        """The daemon's health from its last heartbeat, in the `status --json` shape."""
        from ..core.views import failed_save_json
        from ..service.health import daemons_status

        source = self._reads or self._store.reads
        doc = daemons_status(source.heartbeats(), source.count())
        saves = source.unfinished_last_saves()
        doc["last_save_failed"] = [{"run": s["run"], **failed_save_json(s)} for s in saves]
        return doc
