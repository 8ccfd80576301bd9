"""Epochs, steps and metrics of a run's checkpoints, derived from the whole run at once.

The indexer records what it read of each file; this module then gathers, per run, what the
names say (the run's naming scheme, `core.naming`), what the metrics logs say (wherever they sit,
`formats.run_logs`), the sidecars, the optimizer iteration counts and the content hashes of
every generation, lets `core.derive` decide, and writes back only what changed. Weights are
never read here: `ckpt scan --reindex` is this, for every run, and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..catalog.store import Store
from ..catalog.store_runs import Derivation, RunMember
from ..catalog.store_versions import content_hashes
from ..core.derive import Derived, Logged, Member, Sighting, derive_run, member
from ..core.kept_metrics import as_record, keep_recorded, record_of
from ..core.log_alignment import KERAS_RULE, Evidence, align
from ..core.model import MetricValue
from ..core.naming import RunNaming, infer_naming
from ..core.runs import shared_log_covers
from ..core.training_metrics import FilenameTemplate
from ..formats.metric_files import Sidecar, read_sidecar
from ..formats.run_logs import OtherRuns, RunLogs, logs_signature, read_run_logs
from ..settings.config import RootConfig


@dataclass(frozen=True)
class RunRef:
    """A run folder of a root, and its name in the catalog."""

    root: RootConfig
    folder: Path
    name: str


# Bumped when derivation decides differently (2: logs lined up with the checkpoints' epochs,
# `core.log_alignment`): every run is derived again once by the next scan after an upgrade.
DERIVATION_RULES = 2


def settings_key(root: RootConfig) -> str:
    """What of the config (and of these rules) decides derivation: a change re-derives the
    root's runs."""
    text = json.dumps([list(root.filename_templates), list(root.metrics_files), DERIVATION_RULES])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def signature(run: RunRef, other_runs: OtherRuns) -> list[list[Any]]:
    """The stat signature of the logs `run` reads (no file is read)."""
    sig = logs_signature(run.folder, run.root.path, run.root.metrics_files, other_runs)
    return [list(entry) for entry in sig]


def is_stale(details: dict[str, Any], run: RunRef, other_runs: OtherRuns) -> bool:
    """Whether the run's derivation may be out of date though none of its files changed."""
    return details.get("settings") != settings_key(run.root) or details.get("logs") != signature(
        run, other_runs
    )


@dataclass(frozen=True)
class LogsRead:
    """A run's logs and their stat signature taken just before they were read (so a log written
    meanwhile differs from the signature and is read again by the next scan)."""

    signature: list[list[Any]]
    logs: RunLogs


def run_logs(run: RunRef, other_runs: OtherRuns) -> LogsRead:
    sig = signature(run, other_runs)
    return LogsRead(
        sig, read_run_logs(run.folder, run.root.path, run.root.metrics_files, other_runs)
    )


def sighting_of(logs: RunLogs, mtime_ns: int) -> tuple[int | None, bool] | None:
    """How far the run's epoch log had got, seen now, for a file of mtime `mtime_ns`."""
    if logs.epochs_logged <= 0:
        return None
    return logs.epochs_logged, _epoch_log_mtime(logs) <= mtime_ns


def refresh_run(
    store: Store,
    run: RunRef,
    templates: Sequence[FilenameTemplate],
    *,
    other_runs: OtherRuns,
    at: str,
    read: LogsRead | None = None,
) -> int:
    """Derive the run's checkpoints again (`read`: its logs, if this scan read them already);
    returns how many rows changed."""
    root = str(run.root.path)
    rows = store.run_members(root, run.name)
    if read is None:
        read = run_logs(run, other_runs)
    names = [os.path.basename(r.path) for r in rows]
    logs, naming = _own_logs(read.logs, names, templates)
    present = _names_in(run.folder)  # one listing, not one open per checkpoint
    sidecars = {
        r.id: read_sidecar(Path(f"{r.path}.json"), run.root.path)
        if f"{os.path.basename(r.path)}.json" in present
        else NO_SIDECAR
        for r in rows
    }
    members = [_member(r, naming, _or_recorded(sidecars[r.id], r)) for r in rows]
    alignment = align(logs.streams(), [_evidence(r, m) for r, m in zip(rows, members, strict=True)])
    logs = logs.aligned(alignment)
    logged = dataclasses.replace(_logged(logs), first_epoch=alignment.offset)
    result = derive_run(members, logged)
    offset = alignment.offset
    derived = {r.id: _with_recorded(r, result.members[r.id], offset) for r in rows}
    changes = []
    for row in rows:
        d = derived[row.id]
        details = _update(row, d, sidecars[row.id], offset)
        if details is not None:
            changes.append(
                Derivation(row.id, row.hash, row.mtime_ns, d.epoch, d.step, d.metrics, details)
            )
    written = store.set_derived_many(changes, at=at)
    store.set_derived_many(_version_updates(store, root, run.name, rows, derived, logs), at=at)
    store.set_run_details(
        root,
        run.name,
        {
            "naming": naming.as_json(),
            "steps_per_epoch": result.steps_per_epoch,
            "evidence": list(result.evidence),
            "logs": read.signature,
            "log_files": [f.label for f in logs.files],
            "log_alignment": alignment.as_json(),
            "notes": [*logs.notes, *alignment.notes],
            "settings": settings_key(run.root),
        },
    )
    return written


NO_SIDECAR = Sidecar({}, {}, (), "sidecar")


def _own_logs(
    logs: RunLogs, names: Sequence[str], templates: Sequence[FilenameTemplate]
) -> tuple[RunLogs, RunNaming]:
    """The run's logs (the shared ones that do not cover the epochs its names say dropped) and
    its naming scheme read with them."""
    naming = infer_naming(names, _values(logs), templates)
    if not any(f.shared for f in logs.files):
        return logs, naming
    epochs = [naming.fields(name).ints.get("epoch") for name in names]
    covered = covered_logs(logs, epochs)
    if covered is logs:
        return logs, naming
    return covered, infer_naming(names, _values(covered), templates)


def covered_logs(logs: RunLogs, epochs: Sequence[int | None]) -> RunLogs:
    """`logs` without the shared ones (a folder's log above several runs, naming none) that do
    not cover `epochs` (the run's checkpoints' epochs; None: unknown, ignored), by
    `core.runs.shared_log_covers`. The same object when none is dropped."""
    known = {e for e in epochs if e is not None}
    drop = [
        f.label for f in logs.files if f.shared and not shared_log_covers(f.logged_epochs, known)
    ]
    return logs.without(drop) if drop else logs


def _values(logs: RunLogs) -> dict[int, dict[str, float]]:
    return {e: {k: v.value for k, v in d.items()} for e, d in logs.by_epoch.items()}


def _or_recorded(sidecar: Sidecar, row: RunMember) -> Sidecar:
    """The sidecar, or where there is none, what the file records of itself (a torch dict's
    `epoch`/`global_step`/`val_loss`, Lightning's monitored score): evidence of the same rank."""
    recorded = row.details.get("recorded")
    if sidecar.ints or sidecar.values or not isinstance(recorded, dict):
        return sidecar
    ints = {k: v for k in ("epoch", "step") if isinstance(v := recorded.get(k), int)}
    values = recorded.get("metrics")
    floats = {
        str(k): float(v)
        for k, v in (values.items() if isinstance(values, dict) else [])
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    if not ints and not floats:
        return sidecar
    return Sidecar(ints, floats, sidecar.notes, "checkpoint")


def _evidence(row: RunMember, m: Member) -> Evidence:
    """What a checkpoint says of itself, for `core.log_alignment`."""
    epoch = m.sidecar_ints.get("epoch", m.name_ints.get("epoch"))
    step = m.sidecar_ints.get("step", m.iterations)
    return Evidence(m.name, row.format, epoch, step, m.sidecar_values)


def _names_in(folder: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:  # gone or unreadable: its sidecars cannot be read either
        return frozenset()


def _logged(logs: RunLogs) -> Logged:
    return Logged(logs.by_epoch, logs.by_step, logs.epochs_logged, _epoch_log_mtime(logs))


def _epoch_log_mtime(logs: RunLogs) -> int:
    return max((f.mtime_ns for f in logs.files if f.epochs > 0), default=0)


def _member(row: RunMember, naming: RunNaming, sidecar: Sidecar) -> Member:
    name = os.path.basename(row.path)
    return member(
        row.id,
        name,
        naming.fields(name),
        (sidecar.ints, sidecar.values, sidecar.label),
        digest=row.hash,
        iterations=row.iterations,
        mtime_ns=row.mtime_ns,
        history=tuple(_sightings(row.details.get("generations"))),
    )


def _sightings(entries: object) -> list[Sighting]:
    out: list[Sighting] = []
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and isinstance(e.get("generation"), int):
            out.append(
                Sighting(
                    e["generation"],
                    e.get("hash"),
                    e.get("iterations"),
                    int(e.get("mtime_ns") or 0),
                    e.get("log_epochs"),
                    bool(e.get("log_before")),
                )
            )
    return out


def _current_entry(row: RunMember) -> dict[str, Any] | None:
    """The entry of `row.details["generations"]` of the bytes the row holds now."""
    entries = [g for g in row.details.get("generations") or [] if isinstance(g, dict)]
    return next((g for g in reversed(entries) if row.hash and g.get("hash") == row.hash), None)


def _with_recorded(row: RunMember, d: Derived, offset: int) -> Derived:
    """`d` with the logged metrics recorded for the row's generation at that epoch kept over a
    rewritten log (`core.kept_metrics`), when they were read from the logs' rows lined up as
    now (`offset`, `core.log_alignment`; recorded before it was decided: the Keras rule)."""
    entry = _current_entry(row)
    if entry is None or entry.get("epoch") != d.epoch:
        return d  # a new generation, or one now placed at another epoch: recorded afresh
    if entry.get("log_offset", KERAS_RULE) != offset:
        return d  # recorded from other rows of the logs (one epoch off): recorded afresh
    values, notes = keep_recorded(d.metrics, record_of(entry), d.epoch)
    return dataclasses.replace(d, metrics=values, notes=(*d.notes, *notes))


def _version_updates(
    store: Store,
    root: str,
    run: str,
    rows: Sequence[RunMember],
    derived: dict[int, Derived],
    logs: RunLogs,
) -> list[Derivation]:
    """Each kept version of the run's files gets the epoch, step and metrics of the generation
    it keeps: the file's own when it still holds those bytes, else that generation's epoch
    and the logs' values at it."""
    by_path = {r.path: r for r in rows}
    out = []
    for kept in store.versions_in_run(root, run):
        row = by_path.get(kept.version_of)
        if row is None or row.id not in derived:
            continue  # the file is gone: its versions keep what they were given
        d = derived[row.id]
        if kept.hash in content_hashes(row.hash, row.details):  # compressed since: the same
            epoch, step, values, source = d.epoch, d.step, d.metrics, d.epoch_source
        else:
            found = _generation_epochs(row, d).get(kept.hash or "")
            if found is None:
                continue
            epoch, step = found
            at_epoch = logs.by_epoch.get(epoch, {}) if epoch is not None else {}
            entries = [g for g in row.details.get("generations") or [] if isinstance(g, dict)]
            entry = next((g for g in entries if g.get("hash") == kept.hash), None)
            recorded = record_of(entry) if entry and entry.get("epoch") == epoch else {}
            if not at_epoch and not recorded:
                continue  # no log of that epoch: it keeps what it had when it was current
            values, _ = keep_recorded(tuple(at_epoch[k] for k in sorted(at_epoch)), recorded, epoch)
            source = f"generation {kept.generation} of {os.path.basename(row.path)}"
        details = {"epoch_source": source, "metric_sources": {m.name: m.source for m in values}}
        out.append(Derivation(kept.id, kept.hash, kept.mtime_ns, epoch, step, values, details))
    return out


def _generation_epochs(row: RunMember, d: Derived) -> dict[str, tuple[int | None, int | None]]:
    """{hash: (epoch, step)} of every generation of the file seen, as derivation decided."""
    out: dict[str, tuple[int | None, int | None]] = {}
    entries = [g for g in row.details.get("generations") or [] if isinstance(g, dict)]
    for entry, epoch in zip(entries, d.history_epochs, strict=False):
        if isinstance(entry.get("hash"), str):
            current = entry["hash"] == row.hash
            out[entry["hash"]] = (d.epoch, d.step) if current else (epoch, entry.get("step"))
    if row.hash is not None:
        out[row.hash] = (d.epoch, d.step)
    return out


def _update(row: RunMember, d: Derived, sidecar: Sidecar, offset: int) -> dict[str, Any] | None:
    """The `details` keys to write, or None when the row already says all of this."""
    notes = [*row.details.get("reader_notes", []), *sidecar.notes, *d.notes]
    generations = [dict(g) for g in row.details.get("generations") or [] if isinstance(g, dict)]
    for entry, epoch in zip(generations, d.history_epochs, strict=False):
        entry["epoch"] = d.epoch if entry.get("hash") == row.hash else epoch
        entry["step"] = d.step if entry.get("hash") == row.hash else entry.get("step")
    mine = [g for g in generations if row.hash and g.get("hash") == row.hash]
    current = mine[-1] if mine else None
    if current is not None:  # what the logs said for these bytes: a rewritten log never erases
        current["epoch"], current["step"] = d.epoch, d.step
        current["logged"] = as_record(d.metrics)
        if offset != KERAS_RULE:
            current["log_offset"] = offset
        else:
            current.pop("log_offset", None)
    details = {
        "epoch_source": d.epoch_source,
        "notes": notes,
        "metric_sources": {m.name: m.source for m in d.metrics},
        "generations": generations,
    }
    same = (
        row.metrics_at is not None
        and (row.epoch, row.step) == (d.epoch, d.step)
        and row.metrics == _as_stored(d.metrics)
        and all(row.details.get(k) == v for k, v in details.items())
    )
    return None if same else details


def _as_stored(values: Sequence[MetricValue]) -> dict[str, tuple[float | None, str]]:
    out: dict[str, tuple[float | None, str]] = {}
    for m in values:
        finite = m.value if m.value == m.value and abs(m.value) != float("inf") else None
        out.setdefault(m.name, (finite, m.source))
    return out
