"""Reconcile disk and catalog: index new and changed checkpoints, mark vanished ones missing
(`usecases.vanished`).

Idempotent: a file whose (size, mtime, inode) the catalog already has is not read again; only
its metrics are re-read when a metrics file changed since. Per-item problems never stop a scan.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..catalog.store import Store
from ..catalog.store_claims import Claim
from ..catalog.store_index import Known
from ..children import reader_child
from ..core import completion, families
from ..core.errors import NotACheckpoint, NotReady, ReadProblem, UnfinishedSave, UsageError
from ..core.model import CheckpointInfo, CheckpointStatus, FileStat, IndexRecord
from ..core.progress import Counter, OnProgress
from ..core.training_metrics import compile_template
from ..core.units import iso_utc
from ..core.versions import should_capture
from ..formats.run_index import RunIndex
from ..fs import discovery, fsops
from ..fs.fsops import Refused
from ..logs import event
from ..settings.config import Config, RootConfig
from . import derivation, save_checks, trainer_housekeeping, vanished, versions
from .derivation import RunRef
from .scan_report import ScanReport, record_outcome

# Read again only when their bytes change. An unreadable one is tried again at every scan: a
# chmod or a folder made listable again changes no size, mtime or inode.
# Read again only once their bytes change (an abandoned save: nobody writes in it any more).
_SETTLED = {CheckpointStatus.OK, CheckpointStatus.CORRUPT, CheckpointStatus.ABANDONED}
_FAILED = {CheckpointStatus.CORRUPT, CheckpointStatus.UNREADABLE}


def scan(
    config: Config,
    store: Store,
    targets: Sequence[Path] = (),
    *,
    actor: str,
    progress: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    reconcile: bool = True,
    reindex: bool = False,
    on_progress: OnProgress | None = None,
) -> ScanReport:
    """Scan `targets` (files or folders inside configured roots), or every root if none.

    `should_stop` is asked before each checkpoint: a stopped scan leaves every row it did not
    reach as it was (nothing is marked missing on a partial walk). `reconcile`: first give
    what is in the roots' trash folders its trash records and settle acts of dead processes
    (`usecases.recovery`; the daemon's per-file indexing leaves that to its rescans).
    `reindex`: derive the epochs and metrics of every run walked again, changed or not
    (`usecases.derivation`; no checkpoint is read again).
    `progress` hears each candidate's path before it is looked at; `on_progress` hears it
    start and finish, with what became of it (`indexed`, `unchanged`, `incomplete`, a failed
    status, `skipped`, `vanished`); the total is unknown: a walk finds its items as it goes.
    """
    report = ScanReport()
    counter = Counter(on_progress)
    starts = list(_starts(config, targets))
    if reconcile and not should_stop():
        from . import recovery

        roots = list({id(root): root for root, _start in starts}.values())
        recovery.reconcile(config, store, store.versions, roots)
    for root, start in starts:
        if report.cancelled:
            break
        if not root.path.is_dir():
            # An unmounted or vanished root is an outage, never "everything was deleted".
            report.errors.append(f"root {root.path} is not a folder: nothing marked missing")
            event("root_unavailable", level=logging.ERROR, root=root.path)
            continue
        fsops.remove_stale_temps(start)  # ours, left by killed commands (dead pid, this host)
        # One reader child for all checkpoint files of the scan, started at its first use.
        with reader_child.session():
            walk = _Scan(config, root, store, report, actor, progress, start)
            walk.reindex, walk.counter = reindex, counter
            walk.run(start, should_stop)
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
        self.known = store.index.known_under(str(root.path), where)
        self.trashed_in_place = store.index.trashed_in_place(str(root.path), where)
        self.artifacts = store.acts.artifact_paths(where)
        self.uncaptured = {  # fixed names whose current bytes have no copy: a crash's undone
            path
            for path, generation in store.versions.uncaptured(str(root.path), where).items()
            if should_capture(config.versions.capture, os.path.basename(path), generation)
        }
        self.started = iso_utc(time.time())
        self.unreadable_folders: list[tuple[str, str]] = []  # (folder + "/", reason)
        self.reindex = False
        self.counter = Counter(None)
        self.last_size = 0
        self.last_recorded: str | None = None  # the path `_record` wrote last
        # Run derivation: each run walked is settled once its folder is done (a run's files
        # come together in the walk); touched runs had a file (re)recorded.
        self.run_details = store.runs.run_details(str(root.path))
        self.run_index = RunIndex(root.path / name for name in self.run_details)
        self.logs: dict[Path, derivation.LogsRead] = {}
        self.touched: set[Path] = set()
        self.walked: dict[Path, str] = {}
        self.settled: set[Path] = set()

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
            self.counter.start(text)
            before = self._tally()
            self._enter_run(found.run_dir)
            present = self._visit(found, text, valid)
            if present:
                seen.add(text)
            self.counter.finish(text, *self._outcome(before, present))
        self._settle_runs()
        vanished.mark(
            self.store.index,
            self.root.path,
            start,
            [(path, known) for path, known in self.known.items() if path not in seen],
            self.unreadable_folders,
            self.report,
            actor=self.actor,
            rotated=functools.partial(
                trainer_housekeeping.removed_by_trainer,
                self.store.reads,
                self.store.index,
                root=str(self.root.path),
            ),
        )

    def _tally(self) -> tuple[int, int, int, int]:
        r = self.report
        return len(r.indexed), len(r.incomplete), len(r.failed), len(r.skipped)

    def _outcome(self, before: tuple[int, int, int, int], present: bool) -> tuple[str, int, str]:
        """(outcome, bytes read, detail) of the candidate just visited, from the report."""
        r = self.report
        indexed, incomplete, failed, skipped = (
            now > then for now, then in zip(self._tally(), before, strict=True)
        )
        if not present:
            return "vanished", 0, ""
        if indexed:
            return "indexed", self.last_size, ""
        if incomplete:
            return "incomplete", 0, r.incomplete[-1][1]
        if failed and r.failed[-1][2] != "unchanged since":
            return r.failed[-1][1], 0, r.failed[-1][2]
        if skipped:
            return "skipped", 0, r.skipped[-1][1]
        return "unchanged", 0, ""

    def _enter_run(self, run_dir: Path) -> None:
        """Note the run of a candidate; the run walked before it is settled (derived)."""
        if run_dir not in self.walked:
            self._settle_runs()
            self.walked[run_dir] = self._run_name(run_dir)
            self.run_index.add(run_dir)

    def _settle_runs(self) -> None:
        for run_dir, name in self.walked.items():
            if run_dir in self.settled:
                continue
            self.settled.add(run_dir)
            ref = RunRef(self.root, run_dir, name)
            others = self.run_index  # ignores the asking run and the folders above it
            stale = self.reindex or run_dir in self.touched
            if not stale and not derivation.is_stale(self.run_details.get(name, {}), ref, others):
                continue
            try:
                changed = derivation.refresh_run(
                    self.store.runs,
                    self.store.versions,
                    ref,
                    self.templates,
                    other_runs=others,
                    at=self.started,
                    read=self.logs.get(run_dir),
                )
            except Exception as exc:  # a hostile log must not stop the scan or the daemon
                self.report.errors.append(f"run {name}: epochs and metrics not derived: {exc}")
                event("derive_failed", level=logging.WARNING, run=name, error=str(exc))
                continue
            self.report.metrics_refreshed += changed

    def _visit(self, cand: discovery.Candidate, text: str, valid_name: bool) -> bool:
        """Index or skip one candidate; False if it vanished meanwhile (then it is missing)."""
        try:
            stat = discovery.stat_members(cand.members, cand.path)
        except OSError:
            return False
        if self.trashed_in_place.get(text) == stat:  # in the catalog's trash, still there
            self.report.skipped.append((text, "in the trash (deleted where it is when due)"))
            return True
        known = self.known.get(text)
        if known and known.stat == stat and known.status in _SETTLED:
            self._unchanged(cand, known)
            if text in self.uncaptured and cand.family == discovery.FILE:
                self._capture(known.id)
            return True
        if not valid_name:
            reason = "file name is not valid UTF-8: rename it to have it indexed"
            self._record(cand, text, stat, CheckpointStatus.UNREADABLE, reason)
            return True
        if not self.store.claims.claims_reads():
            return self._index(cand, text, stat)
        # A root other daemons share: read by one of them (catalog.store_claims).
        node = self.config.node_name
        # For as long as a run's lease: a dead claimant's files are read by another daemon
        # after it (a read that outlives it only costs a second read, never a second row).
        claim, other = self.store.claims.claim_read(text, stat, node, self.config.lease_seconds)
        if claim is Claim.RECORDED:
            self.report.unchanged += 1
            return True
        if claim is Claim.ELSEWHERE:
            self.report.elsewhere.append((text, other or "?"))
            return True
        try:
            return self._index(cand, text, stat)
        finally:
            if self.last_recorded != text:  # recording drops the claim in its transaction
                self.store.claims.release_read(text, node)

    def _unchanged(self, cand: discovery.Candidate, known: Known) -> None:
        self.report.unchanged += 1
        if known.status in _FAILED:
            self.report.failed.append((str(cand.path), known.status.value, "unchanged since"))
        elif known.metrics_at is None:  # recorded, never derived (a scan that was stopped)
            self.touched.add(cand.run_dir)

    def _index(self, cand: discovery.Candidate, text: str, stat: FileStat) -> bool:
        from ..formats import savedmodel, tf_checkpoint  # not h5py: files go to the child
        from ..fs.hashing import hash_files
        from .artifacts import adopt

        try:
            if cand.family == discovery.TF_CHECKPOINT:  # file checks here, TF in its child
                info = tf_checkpoint.read(cand.path)
            elif cand.family == discovery.SAVED_MODEL:
                info = savedmodel.read(cand.path)
            else:  # a file or a folder checkpoint (fs.folder_layouts): untrusted bytes
                info = self._read_metadata(cand.path)
            digest = hash_files(cand.members, self.root.path)
            if discovery.stat_members(cand.members, cand.path) != stat:
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
            try:  # judged by the bytes read, not by a stat taken before a trainer's new save
                now = discovery.stat_members(cand.members, cand.path)
            except OSError:
                return False
            if now != stat:
                exc, stat = NotReady(f"changed while it was being read: {exc}"), now
            if isinstance(exc, UnfinishedSave):  # a folder save in flight, or abandoned
                judged = save_checks.unfinished(cand.path, str(exc), self.config, time.time_ns())
                status, reason = judged.status, judged.reason
            else:
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
        # file within bounds, so the hostile-file rails stand in front of this read too. An
        # inference folder (an HF checkpoint's split) carries it as a file inside.
        if (
            _marked(cand.family)
            and (ours := adopt(self.store.reads, self.store.acts, cand.path)) is not None
        ):
            self.report.skipped.append((text, ours))  # marked as split's output: not a checkpoint
            return True
        if save_checks.is_folder_save(cand.family):  # a writer in it, or not confirmed yet
            unsure = save_checks.read_whole(cand.path, info, self.config, time.time_ns())
            if unsure is not None:
                self._record(cand, text, stat, unsure[0], unsure[1], info=info)
                return True
        self._record(cand, text, stat, CheckpointStatus.OK, None, info=info, digest=digest)
        return True

    def _read_metadata(self, path: Path) -> CheckpointInfo:
        """A file's or folder checkpoint's metadata, read by the reader child (untrusted bytes:
        a limited process, killed after `completion.read_timeout`)."""
        return reader_child.read(path, self.root.path, self.config.read_timeout_seconds)

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
        self.touched.add(cand.run_dir)
        self.last_size = stat.size  # the bytes read and hashed, for the progress report
        logs = self._run_logs(cand.run_dir)
        record = IndexRecord(
            path=text,
            root=str(self.root.path),
            run=self._run_name(cand.run_dir),
            status=status,
            reason=reason,
            stat=stat,
            hash=digest,
            info=info,
            sighting=derivation.sighting_of(logs.logs, stat.mtime_ns) if digest else None,
            files=tuple(str(m.relative_to(cand.path.parent)) for m in cand.members)
            if cand.family != discovery.FILE
            else (),
        )
        ckpt_id = self.store.index.record(record, actor_name=self.actor, at=self.started)
        self.last_recorded = text
        record_outcome(self.report, record)
        if status == CheckpointStatus.OK and cand.family == discovery.FILE:
            self._capture(ckpt_id)  # at once: the trainer's next save to its name destroys it

    def _capture(self, ckpt_id: int) -> None:
        store = self.store
        versions.capture(self.config, store, store.versions, self.root, ckpt_id, actor=self.actor)

    def _run_logs(self, run_dir: Path) -> derivation.LogsRead:
        """The run's metrics logs, read once per scan (and reused by its derivation)."""
        if run_dir not in self.logs:
            ref = RunRef(self.root, run_dir, self._run_name(run_dir))
            others = self.run_index  # ignores the asking run and the folders above it
            self.logs[run_dir] = derivation.run_logs(ref, others)
        return self.logs[run_dir]

    def _run_name(self, run_dir: Path) -> str:
        try:
            return discovery.display_path(run_dir.relative_to(self.root.path))[0]
        except ValueError:
            return "."


def _marked(family: str) -> bool:
    """What a split may have written: a file, or a folder of a format whose row splits (an HF
    checkpoint's inference folder)."""
    row = families.row(family)
    return family == discovery.FILE or (row is not None and row.folder and bool(row.splitter))
