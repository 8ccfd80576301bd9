"""The parts `Store` is built from, each a protocol a use case can be typed against: a use case
that needs two or three of them names those (`def prune(catalog: Reads & ...)` is spelled as a
protocol of its own that inherits them, `class PruneCatalog(Reads, Acts, Leasing, Protocol)`),
and a `Store` is each of them (checked statically below and by tests/unit/test_store_parts.py,
which also requires every public `Store` method to be in exactly one part).

    Reads         the hot reads (`hot_reads`) and `show`: listings, best, latest, runs
    Indexing      the indexer's rows: known files under a root, a record per read, marks
    ReadClaiming  read claims of daemons sharing a root (`store_claims`)
    Acts          the catalog side of destructive acts (`store_actions`)
    Recovery      crash recovery's records (`store_recovery`)
    Leasing       run leases (`store_leases`)
    RunFacts      run derivation's members and derived values (`store_runs`)
    Versions      kept versions of rewritten files (`store_versions`)
    Usage         bytes and figures: `ckpt du`, the metrics, the hooks (`store_usage`, ...)
    Daemons       daemons' heartbeats (`store_daemons`)
    RemoteCopies  copies of checkpoints in an object store (`store_remote`)"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.model import (
        AuditEvent,
        Checkpoint,
        CheckpointStatus,
        FileStat,
        Heartbeat,
        IndexRecord,
        Run,
        TrashedCheckpoint,
    )
    from ..core.observability import Figures
    from ..core.query import ListQuery
    from ..core.remote import RemoteCopy, RemoteState
    from ..core.usage import RemoteBytes
    from .store import Known, Store
    from .store_claims import Claim
    from .store_leases import HeldLease
    from .store_recovery import PlannedEvent, RowState
    from .store_runs import Derivation, RunMember
    from .store_usage import ArtifactBytes, CheckpointBytes
    from .store_versions import Source, VersionRow


class Reads(Protocol):
    """The hot reads and `show`: listings, best, latest, one checkpoint, runs."""

    def list(self, query: ListQuery) -> builtins.list[Checkpoint]: ...

    def version_counts(self, paths: builtins.list[str]) -> dict[str, int]: ...

    def metric_names(self) -> set[str]: ...

    def has_metric(self, name: str) -> bool: ...

    def best(
        self, metric: str, mode: str, run: str | None = None, *, versions: bool = False
    ) -> Checkpoint: ...

    def latest(
        self, run: str | None = None, resumable: bool = False, *, versions: bool = False
    ) -> Checkpoint: ...

    def get(self, ref: str) -> Checkpoint: ...

    def count(self) -> int: ...

    def runs(self) -> builtins.list[Run]: ...

    def unfinished_last_saves(self) -> builtins.list[dict[str, Any]]: ...

    def run_keys(self) -> builtins.list[tuple[int, str, str]]: ...


class Indexing(Protocol):
    """The indexer's rows: what the catalog knows under a root, a record per file read, marks
    for files gone."""

    def record(self, rec: IndexRecord, *, actor_name: str, at: str) -> int: ...

    def mark(
        self, ckpt_ids: Iterable[int], status: CheckpointStatus, reason: str, *, actor_name: str
    ) -> int: ...

    def mark_missing(self, ckpt_ids: Iterable[int], reason: str, *, actor_name: str) -> int: ...

    def known_under(self, root: str, start: str | None = None) -> dict[str, Known]: ...

    def trashed_in_place(self, root: str, start: str | None = None) -> dict[str, FileStat]: ...

    def identity(self, ckpt_id: int) -> tuple[FileStat, str | None, list[str]]: ...

    def quick_check(self) -> str | None: ...


class ReadClaiming(Protocol):
    """Read claims of daemons sharing a root."""

    def claims_reads(self) -> bool: ...

    def claim_read(
        self, path: str, stat: FileStat, node: str, ttl_seconds: float
    ) -> tuple[Claim, str | None]: ...

    def release_read(self, path: str, node: str) -> None: ...


class Acts(Protocol):
    """The catalog side of destructive acts: audit events, claims, trash states, pins, artifacts."""

    def audited(
        self,
        *,
        action: str,
        checkpoint_id: int | None,
        path: str,
        reason: str | None,
        size: int | None,
        actor: str,
        lease: HeldLease | None = None,
    ) -> AbstractContextManager[None]: ...

    def claim(
        self,
        checkpoint_id: int,
        *,
        action: str,
        reason: str | None,
        actor: str,
        trash: dict[str, Any] | None = None,
        lease: HeldLease | None = None,
        was: CheckpointStatus | None = None,
    ) -> tuple[int | None, str]: ...

    def end_claim(
        self, event_id: int, checkpoint_id: int, *, failed: str | None = None
    ) -> None: ...

    def set_status(
        self,
        checkpoint_id: int,
        status: CheckpointStatus,
        reason: str | None,
        *,
        trash: dict[str, Any] | None = None,
        clear_trash: bool = False,
    ) -> None: ...

    def add_artifact(
        self,
        checkpoint_id: int,
        *,
        kind: str,
        path: str,
        size: int,
        codec: str | None,
        digest: str | None,
    ) -> None: ...

    def forget_artifact(self, path: str) -> None: ...

    def artifact_owner(self, path: str) -> int | None: ...

    def ids_with_artifact(self, kind: str) -> set[int]: ...

    def record_rewrite(
        self, checkpoint_id: int, *, stat: FileStat, digest: str, codec: str
    ) -> None: ...

    def artifact_paths(self, start: str) -> set[str]: ...

    def set_pinned(self, checkpoint_id: int, pinned: bool, actor: str) -> bool: ...

    def trashed(self, *, include_pinned: bool = True) -> list[TrashedCheckpoint]: ...

    def audit_log(
        self,
        run: str | None = None,
        limit: int | None = None,
        *,
        action: str | None = None,
        state: str | None = None,
        actor: str | None = None,
    ) -> list[AuditEvent]: ...


class Recovery(Protocol):
    """What crash recovery reads and writes: trash records, planned events, their rows."""

    def run_of(self, checkpoint_id: int) -> int: ...

    def trashed_at(self, path: str) -> list[int]: ...

    def trash_paths(self, root: str) -> set[str]: ...

    def adopt_trashed(
        self,
        *,
        root: str,
        run: str,
        path: str,
        stat: FileStat,
        trash: dict[str, Any],
        files: list[str],
        version_of: str | None = None,
        generation: int = 1,
        digest: str | None = None,
        reason: str = "found in the trash folder (the command that moved it was interrupted)",
    ) -> int | None: ...

    def planned_events(self) -> list[PlannedEvent]: ...

    def row_state(self, checkpoint_id: int | None) -> RowState | None: ...

    def settle(
        self,
        event_id: int,
        state: str,
        *,
        checkpoint_id: int | None = None,
        expect: str | None = None,
        status: CheckpointStatus | None = None,
        reason: str | None = None,
        clear_trash: bool = False,
    ) -> None: ...


class Leasing(Protocol):
    """Run leases."""

    def lease(
        self, run_id: int, holder: str, ttl_seconds: float, *, node: str | None = None
    ) -> AbstractContextManager[HeldLease]: ...

    def acquire_lease(
        self, run_id: int, holder: str, ttl_seconds: float, *, node: str | None = None
    ) -> tuple[int, tuple[str, int] | None]: ...

    def drop_dead_leases(self) -> list[tuple[str, int]]: ...

    def release_lease(self, run_id: int, holder: str, token: int | None = None) -> None: ...


class RunFacts(Protocol):
    """Run derivation's members and derived values."""

    def run_members(self, root: str, run: str) -> list[RunMember]: ...

    def run_details(self, root: str) -> dict[str, dict[str, Any]]: ...

    def set_run_details(self, root: str, run: str, details: dict[str, Any]) -> None: ...

    def set_derived_many(self, updates: Sequence[Derivation], *, at: str) -> int: ...


class Versions(Protocol):
    """Kept versions of rewritten files."""

    def version_source(self, checkpoint_id: int) -> Source | None: ...

    def add_version(
        self,
        source: Source,
        path: str,
        stat: FileStat,
        *,
        how: str,
        actor_name: str,
    ) -> int: ...

    def versions_in_run(self, root: str, run: str) -> list[VersionRow]: ...

    def versions_of(self, path: str) -> list[VersionRow]: ...

    def uncaptured(self, root: str, start: str) -> dict[str, int]: ...

    def version_files(self, root: str) -> set[str]: ...

    def record_capture_skipped(
        self,
        checkpoint_id: int,
        generation: int,
        path: str,
        reason: str,
        size: int,
        actor: str,
        action: str = "capture-skipped",
    ) -> bool: ...


class Usage(Protocol):
    """Bytes and figures: `ckpt du`, the metrics, the hooks."""

    def usage(self) -> tuple[list[CheckpointBytes], list[ArtifactBytes]]: ...

    def largest_checkpoint(self, roots: Iterable[str]) -> int: ...

    def spare_artifacts(self, roots: Iterable[str]) -> list[tuple[int, str, int]]: ...

    def kept_copies_bytes(self, roots: Iterable[str]) -> int: ...

    def figures(self, roots: Iterable[str]) -> Figures: ...

    def run_best_other(self, checkpoint_id: int, metric: str, mode: str) -> float | None: ...


class Daemons(Protocol):
    """Daemons' heartbeats."""

    def register(
        self,
        node: str,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        is_live: Callable[[Heartbeat], bool],
    ) -> int: ...

    def record_once(
        self,
        node: str,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        is_live: Callable[[Heartbeat], bool],
    ) -> None: ...

    def heartbeats(self) -> builtins.list[Heartbeat]: ...

    def beat(
        self,
        heartbeat_id: int | None,
        *,
        pid: int,
        host: str,
        started_at: str,
        state: dict[str, Any],
        node: str | None = None,
    ) -> int: ...

    def latest_heartbeat(self) -> Heartbeat | None: ...


class RemoteCopies(Protocol):
    """Copies of checkpoints in an object store (`store_remote`)."""

    def record_remote(
        self,
        checkpoint_id: int,
        *,
        url: str,
        endpoint: str | None,
        size_bytes: int,
        checksum: str | None,
        content_hash: str,
        uploaded_at: str,
    ) -> RemoteCopy: ...

    def remote_copies(
        self, checkpoint_ids: Iterable[int] | None = None
    ) -> builtins.list[RemoteCopy]: ...

    def remote_usage(self) -> builtins.list[RemoteBytes]: ...

    def set_remote_state(
        self,
        copy_id: int,
        state: RemoteState,
        reason: str | None = None,
        *,
        trash_key: str | None = None,
        url: str | None = None,
        checksum: str | None = None,
    ) -> None: ...

    def set_fetched(self, checkpoint_id: int, stat: FileStat) -> None: ...


PARTS: tuple[type, ...] = (
    Reads,
    Indexing,
    ReadClaiming,
    Acts,
    Recovery,
    Leasing,
    RunFacts,
    Versions,
    Usage,
    Daemons,
    RemoteCopies,
)

if TYPE_CHECKING:

    def _a_store_is_every_part(store: Store) -> builtins.list[Any]:
        """mypy's check that `Store` satisfies each part (never called)."""
        parts: tuple[
            Reads,
            Indexing,
            ReadClaiming,
            Acts,
            Recovery,
            Leasing,
            RunFacts,
            Versions,
            Usage,
            Daemons,
            RemoteCopies,
        ] = (store, store, store, store, store, store, store, store, store, store, store)
        return builtins.list(parts)
