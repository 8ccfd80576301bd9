"""Reconcile disk and catalog: index new and changed checkpoints, mark vanished ones missing.

Idempotent: a file whose (size, mtime, inode) the catalog already has is not read again; only
its metrics are re-read when a metrics file changed since. Per-item problems never stop a scan.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog.store import Known, Store
from ..children import reader_child, tf_child
from ..core import completion
from ..core.errors import NotACheckpoint, NotReady, ReadProblem, UsageError
from ..core.metrics import compile_template
from ..core.model import CheckpointInfo, CheckpointStatus, FileStat, IndexRecord
from ..core.units import iso_utc
from ..formats.metric_files import MetricsResult, metrics_for
from ..fs import discovery, fsops
from ..fs.fsops import Refused
from ..logs import event
from ..settings.config import Config, RootConfig

# Read again only when their bytes change. An unreadable one is tried again at every scan: a
# chmod or a folder made listable again changes no size, mtime or inode.
_SETTLED = {CheckpointStatus.OK, CheckpointStatus.CORRUPT}
_GONE = {CheckpointStatus.MISSING, CheckpointStatus.TRASHED, CheckpointStatus.PURGED}
_FAILED = {CheckpointStatus.CORRUPT, CheckpointStatus.UNREADABLE}


@dataclass
class ScanReport:
    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    metrics_refreshed: int = 0
    incomplete: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # path, status, reason
    missing: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # whole roots that could not be scanned
    cancelled: bool = False  # stopped early: nothing was marked missing

    def as_dict(self) -> dict[str, object]:
        return {
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "metrics_refreshed": self.metrics_refreshed,
            "incomplete": [{"path": p, "reason": r} for p, r in self.incomplete],
            "failed": [{"path": p, "status": s, "reason": r} for p, s, r in self.failed],
            "missing": self.missing,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "errors": self.errors,
            "cancelled": self.cancelled,
        }


def scan(
    config: Config,
    store: Store,
    targets: Sequence[Path] = (),
    *,
    actor: str,
    progress: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    reconcile: bool = True,
) -> ScanReport:
    """Scan `targets` (files or folders inside configured roots), or every root if none.

    `should_stop` is asked before each checkpoint: a stopped scan leaves every row it did not
    reach as it was (nothing is marked missing on a partial walk). `reconcile`: first give
    what is in the roots' trash folders its trash records and settle acts of dead processes
    (`usecases.recovery`; the daemon's per-file indexing leaves that to its rescans).
    """
    report = ScanReport()
    starts = list(_starts(config, targets))
    if reconcile and not should_stop():
        from . import recovery

        roots = list({id(root): root for root, _start in starts}.values())
        recovery.reconcile(config, store, roots)
    for root, start in starts:
        if report.cancelled:
            break
        if not root.path.is_dir():
            # An unmounted or vanished root is an outage, never "everything was deleted".
            report.errors.append(f"root {root.path} is not a folder: nothing marked missing")
            event("root_unavailable", level=logging.ERROR, root=root.path)
            continue
        fsops.remove_stale_temps(start)  # ours, left by killed commands (dead pid, this host)
        # One reader child for all checkpoint files of the scan, one TensorFlow child for all
        # TF checkpoints: each started at its first use.
        with reader_child.session(), tf_child.session():
            _Scan(config, root, store, report, actor, progress, start).run(start, should_stop)
    return report


def _starts(config: Config, targets: Sequence[Path]) -> Iterable[tuple[RootConfig, Path]]:
    if not targets:
        return [(root, root.path) for root in config.roots]
    starts = []
    for target in targets:
        root = config.root_for(target)
        if root is None:
            raise UsageError(
                f"{target} is not inside a configured root ({config.source}): "
                "add it under `roots:` or pass --config"
            )
        starts.append((root, Path(os.path.abspath(target))))
    return starts


class _Scan:
    def __init__(
        self,
        config: Config,
        root: RootConfig,
        store: Store,
        report: ScanReport,
        actor: str,
        progress: Callable[[str], None] | None,
        start: Path,
    ) -> None:
        self.config, self.root, self.store, self.report = config, root, store, report
        self.actor, self.progress = actor, progress
        self.templates = [compile_template(t) for t in root.filename_templates]
        # Only the rows at or below `start`: a one-file scan must not load the whole root.
        # The catalog holds paths as text (a name that is not UTF-8 escaped): so are queries.
        where = discovery.display_path(start)[0]
        self.known = store.known_under(str(root.path), where)
        self.artifacts = store.artifact_paths(where)
        self.started = iso_utc(time.time())
        self.metrics_mtimes: dict[Path, int] = {}
        self.unreadable_folders: list[tuple[str, str]] = []  # (folder + "/", reason)

    def run(self, start: Path, should_stop: Callable[[], bool]) -> None:
        seen: set[str] = set()
        skip = frozenset({self.config.state_dir})
        for found in discovery.walk(start, skip, self.root.path):
            if should_stop():
                self.report.cancelled = True
                return
            if isinstance(found, discovery.Skipped):
                self.report.skipped.append((str(found.path), found.reason))
                if found.unreadable_folder:
                    self.unreadable_folders.append((str(found.path) + os.sep, found.reason))
                continue
            text, valid = discovery.display_path(found.path)
            if text in self.artifacts:
                self.report.skipped.append((text, "an artifact ckpt derived from a checkpoint"))
                continue
            if self.progress:
                self.progress(text)
            if self._visit(found, text, valid):
                seen.add(text)
        self._mark_missing(start, seen)

    def _visit(self, cand: discovery.Candidate, text: str, valid_name: bool) -> bool:
        """Index or skip one candidate; False if it vanished meanwhile (then it is missing)."""
        try:
            stat = discovery.stat_members(cand.members)
        except OSError:
            return False
        known = self.known.get(text)
        if known and known.stat == stat and known.status in _SETTLED:
            self._unchanged(cand, known)
            return True
        if not valid_name:
            reason = "file name is not valid UTF-8: rename it to have it indexed"
            self._record(cand, text, stat, CheckpointStatus.UNREADABLE, reason)
            return True
        return self._index(cand, text, stat)

    def _unchanged(self, cand: discovery.Candidate, known: Known) -> None:
        self.report.unchanged += 1
        if known.status in _FAILED:
            self.report.failed.append((str(cand.path), known.status.value, "unchanged since"))
        elif known.status == CheckpointStatus.OK and self._metrics_changed(cand, known):
            result = self._metrics(cand)
            self.store.update_metrics(
                known.id, result.epoch, result.step, result.metrics, at=self.started
            )
            self.report.metrics_refreshed += 1

    def _index(self, cand: discovery.Candidate, text: str, stat: FileStat) -> bool:
        from ..formats import savedmodel, tf_checkpoint  # not h5py: files go to the child
        from ..fs.hashing import hash_files
        from .artifacts import adopt

        try:
            if cand.family == discovery.FILE:  # untrusted bytes: read by a limited child
                info = reader_child.read(cand.path, self.root.path)
            elif cand.family == discovery.TF_CHECKPOINT:  # file checks here, TF in its child
                info = tf_checkpoint.read(cand.path)
            else:
                info = savedmodel.read(cand.path)
            digest = hash_files(cand.members, self.root.path)
            if discovery.stat_members(cand.members) != stat:
                raise NotReady("changed while it was being read")
        except NotACheckpoint as exc:
            if text in self.known:  # it was a checkpoint: say what it became, keep the row
                self._record(
                    cand, text, stat, CheckpointStatus.CORRUPT, f"no longer a checkpoint: {exc}"
                )
            else:
                self.report.skipped.append((text, str(exc)))
            return True
        except FileNotFoundError:
            return False
        except Refused as exc:  # swapped for a symlink or a FIFO since discovery: never read
            self.report.skipped.append((text, str(exc)))
            return True
        except ReadProblem as exc:
            status, reason = completion.verdict(
                exc, stat, time.time_ns(), self.config.settle_seconds
            )
            self._record(cand, text, stat, status, reason)
            return True
        except Exception as exc:  # a hostile file must not stop the scan or the daemon
            reason = f"unexpected {type(exc).__name__} while reading: {exc}".splitlines()[0]
            self._record(cand, text, stat, CheckpointStatus.CORRUPT, reason)
            return True
        # Our own outputs carry a marker; looked for only once the limited child has read the
        # file within bounds, so the hostile-file rails stand in front of this read too.
        if cand.family == discovery.FILE and (ours := adopt(self.store, cand.path)) is not None:
            self.report.skipped.append((text, ours))  # marked as split's output: not a checkpoint
            return True
        self._record(cand, text, stat, CheckpointStatus.OK, None, info=info, digest=digest)
        return True

    def _record(
        self,
        cand: discovery.Candidate,
        text: str,
        stat: FileStat,
        status: CheckpointStatus,
        reason: str | None,
        *,
        info: CheckpointInfo | None = None,
        digest: str | None = None,
    ) -> None:
        result = self._metrics(cand)
        record = IndexRecord(
            path=text,
            root=str(self.root.path),
            run=self._run_name(cand.run_dir),
            status=status,
            reason=reason,
            stat=stat,
            hash=digest,
            info=info,
            epoch=result.epoch,
            step=result.step,
            metrics=result.metrics,
            notes=result.notes,
            files=tuple(str(m.relative_to(cand.path.parent)) for m in cand.members)
            if cand.family != discovery.FILE
            else (),
        )
        self.store.record(record, actor_name=self.actor, at=self.started)
        _report(self.report, record)

    def _metrics(self, cand: discovery.Candidate) -> MetricsResult:
        return metrics_for(
            cand.path, cand.run_dir, self.templates, self.root.metrics_files, self.root.path
        )

    def _metrics_changed(self, cand: discovery.Candidate, known: Known) -> bool:
        if known.metrics_at is None:
            return True
        read_at = int(dt.datetime.fromisoformat(known.metrics_at).timestamp() * 1e9)
        return self._newest_metrics_file(cand) >= read_at

    def _newest_metrics_file(self, cand: discovery.Candidate) -> int:
        run_dir = cand.run_dir
        if run_dir not in self.metrics_mtimes:
            newest = 0
            for pattern in self.root.metrics_files:
                for match in run_dir.glob(pattern):
                    newest = max(newest, _mtime_ns(match))
            self.metrics_mtimes[run_dir] = newest
        sidecar = cand.path.with_name(cand.path.name + ".json")
        return max(self.metrics_mtimes[run_dir], _mtime_ns(sidecar))

    def _run_name(self, run_dir: Path) -> str:
        try:
            return discovery.display_path(run_dir.relative_to(self.root.path))[0]
        except ValueError:
            return "."

    def _mark_missing(self, start: Path, seen: set[str]) -> None:
        where = discovery.display_path(start)[0]
        prefix = where.rstrip(os.sep) + os.sep
        gone = [
            (path, known)
            for path, known in self.known.items()
            if path not in seen
            and known.status not in _GONE
            and (path == where or path.startswith(prefix))
        ]
        hidden: dict[str, list[tuple[str, Known]]] = {}  # below a folder we may not list
        for path, known in gone:
            why = next((r for f, r in self.unreadable_folders if path.startswith(f)), None)
            if why is not None:
                hidden.setdefault(why, []).append((path, known))
        for reason, rows in hidden.items():
            ids = [k.id for _p, k in rows if k.status != CheckpointStatus.UNREADABLE]
            self.store.mark(ids, CheckpointStatus.UNREADABLE, reason, actor_name=self.actor)
            self.report.failed += [(p, CheckpointStatus.UNREADABLE.value, reason) for p, _k in rows]
        hidden_paths = {p for rows in hidden.values() for p, _k in rows}
        gone = [(p, k) for p, k in gone if p not in hidden_paths]
        self.store.mark_missing(
            [k.id for _p, k in gone], "no longer on disk", actor_name=self.actor
        )
        for path, _known in gone:
            self.report.missing.append(path)
            event("missing", path=path)


def _mtime_ns(path: Path) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0


def _report(report: ScanReport, record: IndexRecord) -> None:
    if record.status == CheckpointStatus.OK:
        report.indexed.append(record.path)
        event(
            "indexed",
            path=record.path,
            format=record.info.format if record.info else None,
            epoch=record.epoch,
            step=record.step,
        )
    elif record.status == CheckpointStatus.INCOMPLETE:
        report.incomplete.append((record.path, record.reason or ""))
        event("incomplete", path=record.path, reason=record.reason)
    else:
        report.failed.append((record.path, record.status.value, record.reason or ""))
        event(record.status.value, level=logging.WARNING, path=record.path, reason=record.reason)
