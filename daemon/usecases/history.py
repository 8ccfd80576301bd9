"""Looking at runs: a run's history (its logs by epoch and its checkpoints, marked), and the disk
space of every root, run and kind. What is read: the catalog, and the run's training logs
(`formats.run_logs`, bounded, beneath the root), never a checkpoint's bytes; what is written:
only the file a command was asked for (`ckpt plot -o`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..catalog.store import Reads, RemoteCopies, Runs, UsageReads
from ..core.errors import NotFound, UsageError
from ..core.history import (
    History,
    build,
    chosen_metrics,
    members_of,
    versioned_run,
)
from ..core.log_alignment import Alignment
from ..core.model import Checkpoint
from ..core.query import ListQuery
from ..core.usage import RootUsage, summarize
from ..core.versions import VERSIONS_DIR
from ..formats.run_logs import read_run_logs
from ..settings.config import Config
from .derivation import covered_logs


def run_history(
    config: Config, reads: Reads, catalog_runs: Runs, run: str, metrics: Sequence[str] = ()
) -> History:
    """The history of `run` (one run: a name that covers several runs below it must name one)
    for `metrics` (default: `core.history.chosen_metrics`). NotFound when the catalog has no
    checkpoint of it."""
    root, name, rows = _run_rows(reads, run)
    logged, notes = _logged(config, reads, catalog_runs, root, name, [r.epoch for r in rows])
    policy, _ = config.policy_for(root, name)
    monitored = [b.metric for b in policy.keep_best] if policy is not None else []
    chosen = chosen_metrics(metrics, logged, rows, monitored)
    present = {n for values in logged.values() for n in values} | {
        n for c in rows for n in c.metrics
    }
    unknown = [m for m in chosen if m not in present]
    if metrics and unknown:  # a typo would show an empty column
        shown = ", ".join(sorted(present)) or "none"
        raise UsageError(
            f"--metric {unknown[0]!r}: not logged or recorded for run {name!r} "
            f"(its metrics: {shown})"
        )
    if not chosen:
        notes.append("no metric is logged or recorded for this run")
    return build(name, root, rows, logged, chosen, notes)


def _run_rows(reads: Reads, run: str) -> tuple[str, str, list[Checkpoint]]:
    run = versioned_run(run)  # a versions folder is its run's: the whole history is shown
    rows = reads.list(ListQuery(run=run, sort="id"))
    # Versions kept in a folder of ours at the root (`.ckpt-versions/RUN/...`), if any.
    rows += reads.list(ListQuery(run=f"{VERSIONS_DIR}/{run}", sort="id")) if rows else []
    if not rows:
        raise NotFound(f"no checkpoint of run {run!r} in the catalog (see `ckpt runs`)")
    own = {(r.root, versioned_run(r.run)) for r in rows}
    if run in {name for _, name in own}:
        own = {(root, name) for root, name in own if name == run}
    if len(own) > 1:
        shown = ", ".join(f"{name} (in {root})" for root, name in sorted(own)[:5])
        shown += ", ..." if len(own) > 5 else ""
        raise UsageError(f"--run {run!r} covers {len(own)} runs: {shown}; name one of them")
    root, name = next(iter(own))
    return root, name, members_of(name, [r for r in rows if r.root == root])


def _logged(
    config: Config,
    reads: Reads,
    catalog_runs: Runs,
    root: str,
    run: str,
    epochs: Sequence[int | None],
) -> tuple[dict[int, dict[str, float]], list[str]]:
    """What the run's logs hold by epoch (a shared log above it only if it covers `epochs`, the
    run's checkpoints', as derivation decides); a note instead when they cannot be read."""
    configured = next((r for r in config.roots if str(r.path) == root), None)
    if configured is None:
        return {}, [f"root {root} is not in the config: its logs were not read"]
    folder = configured.path if run == "." else configured.path / run
    others = [Path(r) / name for _, r, name in reads.run_keys() if r == root and name != run]
    try:
        # read alone, without `run_logs`'s stat signature (what a scan compares, not a page)
        logs = covered_logs(
            read_run_logs(folder, configured.path, configured.metrics_files, others), epochs
        )
        # Rows at the checkpoints' epochs, as derivation lined them up (`core.log_alignment`).
        details = catalog_runs.run_details(root).get(run, {})
        logs = logs.aligned(Alignment.of_json(details.get("log_alignment")))
    except ValueError as exc:  # the run's folder is not beneath its root any more
        return {}, [f"logs not read: {exc}"]
    by_epoch = {epoch: logs.values_at(epoch) for epoch in logs.by_epoch}
    return by_epoch, list(logs.notes)


def disk_usage(usage: UsageReads, remote_copies: RemoteCopies) -> list[RootUsage]:
    """Bytes per root, run and kind from the catalog (`core.usage`), biggest first."""
    checkpoints, artifacts = usage.usage()
    return summarize(checkpoints, artifacts, remote_copies.remote_usage())


def write_output(path: Path, data: bytes) -> None:
    """A file a command was asked to write (`ckpt plot -o`): whole or not at all (temp file,
    fsync, rename), never a half PNG at the name."""
    from ..fs.fsops import atomic_write

    absolute = Path(os.path.abspath(path))
    try:
        atomic_write(absolute.parent, absolute, data)
    except OSError as exc:  # no such folder, not allowed: the user's path, a usage error
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
