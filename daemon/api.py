"""The Python API for scripts: the same operations as the `ckpt` command, returning plain values.

from ckpt_daemon.api import open_catalog
with open_catalog() as cat:
    best = cat.best("val_loss")                      # a ckpt_daemon.core.model.Checkpoint
    resume = cat.latest("exp1", resumable=True)      # the newest checkpoint training resumes from
    recent = cat.list(run="exp1", where=["epoch >= 10"], sort="val_loss", limit=5)
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .core.errors import NotFound, UsageError
from .core.model import Checkpoint, CheckpointStatus, Format, Kind, Run
from .core.progress import OnProgress
from .core.query import (
    Condition,
    ListQuery,
    default_mode,
    metric_keys,
    parse_condition,
    unknown_key,
)
from .settings import config as config_module
from .settings.config import Config

if TYPE_CHECKING:
    from .catalog.dbapi_reads import DbapiReads
    from .catalog.store import Store
    from .core.card import Facts
    from .core.history import History
    from .core.retention import Policy
    from .core.usage import RootUsage
    from .transforms.compress import CompressResult
    from .transforms.export_json_h5 import ExportResult
    from .transforms.split import SplitResult
    from .usecases.pruner import PruneReport
    from .usecases.scan_report import ScanReport
    from .usecases.tiering import TierReport
    from .usecases.verifier import Verdict


class Catalog:
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
            from .catalog.store import Store

            self._opened = Store(
                self.config.database,
                may_migrate=self._may_migrate,
                named_roots=self.config.named_roots(),
                node=self.config.node_name,
            )
        return self._opened

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
        row considered (a tiered checkpoint's local copy is in the trash)."""
        if location is not None:
            from .usecases.locations import filtered

            every = self.list(run, where, sort, desc, None, format, status, kind, versions, True)
            return filtered(self._store, every, location, limit)
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
        source = self._reads or self._store
        for what, key in metric_keys(query):
            if not source.has_metric(key):
                raise UsageError(unknown_key(what, source.metric_names()))
        found = source.list(query)
        counts = source.version_counts([c.path for c in found if c.version_of is None])
        if not counts:
            return found
        return [dataclasses.replace(c, versions_kept=counts.get(c.path, 0)) for c in found]

    def locations(self, found: Sequence[Checkpoint]) -> dict[int, tuple[str, str | None]]:
        """{id: (location, remote_url)} of these rows: where their bytes are (`local`,
        `remote`, `both`, `none`) and their verified remote copy's `s3://` URL. Without a
        `remote:` in the config and no copy recorded, from the status alone (no Store opened)."""
        from .usecases.locations import locations

        return locations(self.config, lambda: self._store, found)

    def tier(
        self, refs: Sequence[str | int], *, dry_run: bool = False, actor: str | None = None
    ) -> TierReport:
        """Upload each checkpoint to its root's object store, verify the copy, record it, then
        move the local copy to the trash (`ckpt tier`)."""
        from .usecases.tiering import tier

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
        from .usecases.fetching import fetch

        return fetch(
            self.config,
            self._store,
            self.ref(ref),
            to=Path(to) if to is not None else None,
            actor=actor or _actor(),
        )

    def best(self, metric: str, mode: str | None = None, run: str | None = None) -> Checkpoint:
        """The `ok` checkpoint with the best value of `metric` (mode as Keras's "auto") whose
        files are unchanged since indexed (a changed one is skipped for the next). UsageError
        when no checkpoint in the catalog has `metric` (a typo), naming the metrics there."""
        source = self._reads or self._store
        try:
            return source.best(metric, mode or default_mode(metric), run)
        except NotFound:
            self.check_metric("--metric", metric)
            raise

    def latest(self, run: str | None = None, resumable: bool = False) -> Checkpoint:
        """The newest `ok` checkpoint of `run` (and the runs below it): the most training
        progress (optimizer iterations, then epoch, step, mtime). `resumable`: only one that can
        resume training (optimizer state that its loader restores: `core.resume`). Its files are
        stat'ed first: one changed since indexed is skipped for the next. `details` holds
        `resumable`, `resume_reason`, `keras_version`, `iterations` and `skipped` (changed
        candidates passed over). Without `run` the catalog must hold one run with ok
        checkpoints (else UsageError). NotFound when there is none."""
        return (self._reads or self._store).latest(run, resumable)

    def metric_names(self) -> set[str]:
        """Every metric name any checkpoint in the catalog has."""
        return (self._reads or self._store).metric_names()

    def check_metric(self, what: str, metric: str) -> None:
        """UsageError naming the catalog's metrics when no checkpoint has `metric` (a typo in
        option `what`)."""
        source = self._reads or self._store
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
                self._store.get(candidate)
            except NotFound:
                continue
            return candidate
        return here

    def get(self, ref: str | int) -> Checkpoint:
        """By catalog id or path; the result's `details` has layers, configs and events."""
        return self._store.get(self.ref(ref))

    def runs(self) -> builtins.list[Run]:
        return self._store.runs()

    def history(self, run: str, metrics: Sequence[str] = ()) -> History:
        """A run's metrics per epoch (its logs and its checkpoints) with every checkpoint
        marked: kept, best (per metric), pinned, trashed, version, missing (`ckpt history`)."""
        from .usecases.history import run_history

        return run_history(self.config, self._store, run, metrics)

    def du(self) -> builtins.list[RootUsage]:
        """Bytes per root, run and kind (checkpoint, inference, version, trash), biggest
        first, from the catalog alone (`ckpt du`)."""
        from .usecases.history import disk_usage

        return disk_usage(self._store)

    def plan_prune(self, runs: Sequence[str] = (), policy: Policy | None = None) -> PruneReport:
        """What `prune` would do, with every decision's reasons; changes nothing."""
        from .usecases import pruner

        return pruner.plan_runs(self.config, self._store, list(runs) or None, policy)

    def prune(
        self,
        runs: Sequence[str] = (),
        policy: Policy | None = None,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        on_progress: OnProgress | None = None,
    ) -> PruneReport:
        """Apply retention (`policy`, else the configured ones): doomed checkpoints go to the
        trash (restore with `restore`); per-item failures are in `report.failures`."""
        from .usecases import pruner

        return pruner.prune(
            self.config,
            self._store,
            runs=list(runs) or None,
            override=policy,
            dry_run=dry_run,
            actor=actor or _actor(),
            on_progress=on_progress,
        )

    def restore(self, ref: str | int, *, actor: str | None = None) -> Checkpoint:
        from .usecases import pruner

        return pruner.restore(self.config, self._store, self.ref(ref), actor or _actor())

    def restore_version(
        self,
        path: str,
        *,
        version: int | None = None,
        epoch: int | None = None,
        actor: str | None = None,
    ) -> Checkpoint:
        """Put a kept generation of the rewritten file `path` back at `path` (by generation
        `version`, or the newest kept one of `epoch`); its current generation is kept first.
        Returns the file's row, re-indexed."""
        from .usecases import versions

        return versions.restore_version(
            self.config,
            self._store,
            self.ref(path),
            generation=version,
            epoch=epoch,
            actor=actor or _actor(),
        )

    def pin(self, ref: str | int, pinned: bool = True) -> Checkpoint:
        from .usecases import pruner

        return pruner.set_pinned(self._store, self.ref(ref), pinned, _actor())

    def trash(self) -> builtins.list[dict[str, Any]]:
        """Trashed checkpoints: original and trash paths, bytes, when and why."""
        from .core.views import trashed_json

        return [trashed_json(t) for t in self._store.trashed()]

    def purge(
        self, older_than: str | None = None, *, dry_run: bool = False
    ) -> tuple[builtins.list[dict[str, Any]], builtins.list[dict[str, Any]]]:
        """Delete what was trashed longer ago than `older_than` (default: trash.purge_after).
        Returns (purged, failures)."""
        from .core.views import trashed_json
        from .usecases import pruner

        seconds = pruner.parse_older_than(older_than, self.config)
        purged, failures = pruner.purge(
            self.config, self._store, older_than=seconds, dry_run=dry_run, actor=_actor()
        )
        return [trashed_json(t) for t in purged], failures

    def log(
        self, run: str | None = None, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """The audit events, oldest first (the newest `limit` of them)."""
        from .core.views import event_json

        return [event_json(e) for e in self._store.audit_log(run, limit)]

    def split(
        self,
        ref: str | int,
        *,
        out: Path | None = None,
        keep_compile: bool = False,
        actor: str | None = None,
        on_progress: OnProgress | None = None,
    ) -> tuple[Checkpoint, SplitResult]:
        """Write and register the inference artifact of a checkpoint."""
        from .usecases.artifacts import split_checkpoint

        return split_checkpoint(
            self.config,
            self._store,
            self.ref(ref),
            out=out,
            keep_compile=keep_compile,
            actor=actor or _actor(),
            on_progress=on_progress,
        )

    def export(
        self, ref: str | int, *, out: Path | None = None, actor: str | None = None
    ) -> tuple[Checkpoint, ExportResult]:
        """`ckpt split --layout json+h5`: `<stem>.json` + `<stem>.weights.h5` + the card."""
        from .usecases.artifacts import export_checkpoint

        return export_checkpoint(
            self.config, self._store, self.ref(ref), out=out, actor=actor or _actor()
        )

    def describe(self, ref: str | int) -> Facts:
        """The model card's facts of a checkpoint or artifact (`core.card`; render them with
        `usecases.describe.render(facts, "md"|"json"|"txt")`)."""
        from .usecases.describe import describe

        return describe(self.config, self._store, self.ref(ref))

    def compress(
        self,
        ref: str | int,
        *,
        codec: str = "gzip",
        level: int | None = None,
        shuffle: bool = True,
        actor: str | None = None,
        on_progress: OnProgress | None = None,
    ) -> tuple[Checkpoint, CompressResult]:
        """Compress a checkpoint in place, losslessly and verified."""
        from .usecases.artifacts import compress_checkpoint

        return compress_checkpoint(
            self.config,
            self._store,
            self.ref(ref),
            codec=codec,
            level=level,
            shuffle=shuffle,
            actor=actor or _actor(),
            on_progress=on_progress,
        )

    def verify(
        self,
        refs: Sequence[str | int] = (),
        *,
        load: bool = False,
        actor: str | None = None,
        on_verdict: Callable[[Verdict], None] | None = None,
        on_progress: OnProgress | None = None,
    ) -> builtins.list[Verdict]:
        """Re-hash checkpoints (all `ok` ones by default) and their artifacts; with `load`,
        also load them with Keras in a child process and compare predictions. A checkpoint
        whose hash differs under an unchanged stat (bit rot) is marked `corrupt`.
        `on_verdict` gets each verdict as soon as it is known, `on_progress` each checkpoint's
        start and end."""
        from .usecases.verifier import verify

        return verify(
            self.config,
            self._store,
            [self.ref(r) for r in refs],
            load=load,
            actor=actor or _actor(),
            on_verdict=on_verdict,
            on_progress=on_progress,
        )

    def status(self) -> dict[str, Any]:
        """The daemon's health from its last heartbeat, in the `status --json` shape."""
        from .service.health import daemons_status

        source = self._reads or self._store
        return daemons_status(source.heartbeats(), source.count())

    def scan(
        self,
        paths: Sequence[str | Path] = (),
        *,
        actor: str | None = None,
        progress: Callable[[str], None] | None = None,
        reindex: bool = False,
        on_progress: OnProgress | None = None,
    ) -> ScanReport:
        """Index now: the given files/folders (inside configured roots), or every root.
        `reindex`: derive every walked run's epochs and metrics again (no weights read)."""
        from .usecases.indexer import scan

        return scan(
            self.config,
            self._store,
            [Path(p) for p in paths],
            actor=actor or _actor(),
            progress=progress,
            reindex=reindex,
            on_progress=on_progress,
        )


def _actor() -> str:
    from .catalog.audit import actor

    return actor()


def open_catalog(
    config_path: str | None = None, database: str | None = None, *, may_migrate: bool = False
) -> Catalog:
    """Open the catalog named by `database`, $CKPT_DB or the config (created at head if new)."""
    config = config_module.load(config_path, database_override=database)
    reads = None if may_migrate else _fast_reads(config)
    if reads is not None:  # a catalog at head: the Store opens when first needed
        return Catalog(config, reads=reads)
    from .catalog.store import Store

    store = Store(
        config.database,
        may_migrate=may_migrate,
        named_roots=config.named_roots(),
        node=config.node_name,
    )
    return Catalog(config, store)


def _fast_reads(config: Config) -> DbapiReads | None:
    """The SQLAlchemy-free reads of a local SQLite file or a plain PostgreSQL URL at the schema
    head (paths of named roots converted as the Store does), else None."""
    from .catalog.postgres_reads import PostgresReads
    from .catalog.sqlite_reads import SqliteReads
    from .core.root_names import PathCodec

    codec = PathCodec(config.named_roots())
    url = config.database
    if url.startswith("sqlite"):
        return SqliteReads.open(url, codec)
    return PostgresReads.open(url, codec)
