"""The Python API's acts (`ckpt_daemon.api.Catalog`'s half that changes files or the catalog):
scan, prune and its plan, restore (from the trash or a kept version), pin, purge, split and
export, describe, compress, verify. Each runs the use case the `ckpt` command runs."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.model import Checkpoint
from ..core.progress import OnProgress
from .reads import CatalogReads

if TYPE_CHECKING:
    from ..core.card import Facts
    from ..core.history import History
    from ..core.retention import Policy
    from ..transforms.compress import CompressResult
    from ..transforms.export_json_h5 import ExportResult
    from ..transforms.split import SplitResult
    from ..usecases.pruner import PruneReport
    from ..usecases.scan_report import ScanReport
    from ..usecases.verifier import Verdict


class CatalogActs(CatalogReads):
    """The reads and what a script does to checkpoints; the audit names `actor` (default: the
    user and host, as the CLI's)."""

    def plan_prune(
        self,
        runs: Sequence[str] = (),
        policy: Policy | None = None,
        *,
        history: History | None = None,
    ) -> PruneReport:
        """What `prune` would do, with every decision's reasons; changes nothing. `history`: the
        `history()` of a run planned, whose rows are then not read again (the web view's run
        page shows both)."""
        from ..usecases import pruner

        listed = (
            {(history.root, history.run): [m.checkpoint for m in history.checkpoints]}
            if history is not None
            else None
        )
        return pruner.plan_runs(
            self.config,
            self._store.reads,
            self._store.remote,
            self._store.stage_jobs,
            list(runs) or None,
            policy,
            listed=listed,
        )

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
        from ..usecases import pruner

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
        from ..usecases import pruner

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
        from ..usecases import indexer, versions

        who, absolute = actor or _actor(), os.path.abspath(self.ref(path))

        def index(file: Path) -> None:
            indexer.scan(self.config, self._store, [file], actor=who, reconcile=False)

        versions.restore_version(
            self.config,
            self._store,
            self._store.versions,
            absolute,
            generation=version,
            epoch=epoch,
            actor=who,
            index=index,
        )
        index(Path(absolute))  # the row then describes the generation put back
        return self._store.reads.get(absolute)

    def pin(self, ref: str | int, pinned: bool = True) -> Checkpoint:
        from ..usecases import pruner

        return pruner.set_pinned(
            self._store.reads, self._store.acts, self.ref(ref), pinned, _actor()
        )

    def purge(
        self, older_than: str | None = None, *, dry_run: bool = False
    ) -> tuple[builtins.list[dict[str, Any]], builtins.list[dict[str, Any]]]:
        """Delete what was trashed longer ago than `older_than` (default: trash.purge_after).
        Returns (purged, failures)."""
        from ..core.views import trashed_json
        from ..usecases import pruner

        seconds = pruner.parse_older_than(older_than, self.config)
        purged, failures = pruner.purge(
            self.config, self._store, older_than=seconds, dry_run=dry_run, actor=_actor()
        )
        return [trashed_json(t) for t in purged], failures

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
        from ..usecases.artifacts import split_checkpoint

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
        from ..usecases.artifacts import export_checkpoint

        return export_checkpoint(
            self.config, self._store, self.ref(ref), out=out, actor=actor or _actor()
        )

    def describe(self, ref: str | int) -> Facts:
        """The model card's facts of a checkpoint or artifact (`core.card`; render them with
        `usecases.describe.render(facts, "md"|"json"|"txt")`)."""
        from ..usecases.describe import describe

        return describe(self.config, self._store.reads, self._store.acts, self.ref(ref))

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
        from ..usecases.artifacts import compress_checkpoint

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
        from ..usecases.verifier import verify

        return verify(
            self.config,
            self._store.reads,
            self._store.index,
            self._store.acts,
            [self.ref(r) for r in refs],
            load=load,
            actor=actor or _actor(),
            on_verdict=on_verdict,
            on_progress=on_progress,
        )

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
        from ..usecases.indexer import scan

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
    from ..catalog.audit import actor

    return actor()
