"""What a scan did (`ckpt scan --json`, the service's events): the `ScanReport` the indexer
fills, and the one place a recorded file's outcome is told (report line and log event)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..core.model import CheckpointStatus, IndexRecord
from ..logs import event


@dataclass
class ScanReport:
    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    metrics_refreshed: int = 0
    incomplete: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # path, status, reason
    missing: list[str] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)  # by their trainer: path, why
    skipped: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # whole roots that could not be scanned
    cancelled: bool = False  # stopped early: nothing was marked missing
    elsewhere: list[tuple[str, str]] = field(default_factory=list)  # read by another node now

    def as_dict(self) -> dict[str, object]:
        return {
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "metrics_refreshed": self.metrics_refreshed,
            "incomplete": [{"path": p, "reason": r} for p, r in self.incomplete],
            "failed": [{"path": p, "status": s, "reason": r} for p, s, r in self.failed],
            "missing": self.missing,
            "removed": [{"path": p, "reason": r} for p, r in self.removed],
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "errors": self.errors,
            "cancelled": self.cancelled,
            "elsewhere": [{"path": p, "node": n} for p, n in self.elsewhere],
        }


def record_outcome(report: ScanReport, record: IndexRecord) -> None:
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
