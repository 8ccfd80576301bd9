"""The Prometheus metrics, the only prometheus_client import: `ckpt serve`'s `/metrics` and
`ckpt metrics --textfile` (node_exporter's textfile collector) print the same text, built by
`metrics_text` from the catalog's figures (`UsageReads.figures`: all-time totals from the audit
events, so counters survive restarts) and the service's state (live in `ckpt serve`; the newest
heartbeat's for `ckpt metrics`). Every name has the one `ckpt_` prefix, base units (bytes,
seconds) and `_total` on counters. docs/service.md's metric table lists
them with their labels."""

from __future__ import annotations

import os
import platform
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from ..catalog.store import Store
from ..core.observability import Figures, iso_seconds
from ..fs import fsops
from ..logs import event
from ..settings.config import Config
from ..settings.operations import Listen

# Errors the service counts since it started (`ckpt_errors_total{kind}`): a closed set.
ERROR_KINDS = ("index", "scan", "worker", "job", "scheduler", "hook", "stage")
F = TypeVar("F", GaugeMetricFamily, CounterMetricFamily)


@dataclass(frozen=True)
class Snapshot:
    """Everything one exposition reads, taken at once."""

    figures: Figures
    state: Mapping[str, Any]  # the service's `metrics` state (see `service_state`)
    free: Mapping[str, int | None]  # root -> free bytes for unprivileged users (None: unknown)
    min_free: Mapping[str, int]  # root -> the disk guard's threshold in bytes (0: not guarded)
    # (stage, state) -> the pipeline's jobs (`pipeline:`; empty without one)
    stage_jobs: Mapping[tuple[str, str], int] = field(default_factory=dict)


def snapshot(config: Config, store: Store, state: Mapping[str, Any]) -> Snapshot:
    roots = [str(r.path) for r in config.roots]
    return Snapshot(
        figures=store.usage.figures(roots),
        state=state,
        free={root: _free_bytes(root) for root in roots},
        min_free=_thresholds(config),
        stage_jobs=store.stage_jobs.counts() if config.pipeline else {},
    )


def metrics_text(snap: Snapshot) -> bytes:
    """The exposition in Prometheus's text format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(lambda: snap))
    return generate_latest(registry)


def heartbeat_state(store: Store) -> dict[str, Any]:
    """The `metrics` state of the newest heartbeat (empty if no daemon ever ran)."""
    beat = store.reads.latest_heartbeat()
    state = dict((beat.state or {}).get("metrics") or {}) if beat else {}
    if beat is not None:
        state["heartbeat_time"] = iso_seconds(beat.heartbeat_at)
    return state


def write_textfile(path: Path, text: bytes) -> None:
    """Atomically (temp file, fsync, rename): the collector never reads half a file. The temp
    name ends in `.tmp`, not `.prom`: node_exporter reads every `*.prom` of its folder."""
    absolute = Path(os.path.abspath(path))
    fsops.atomic_write(absolute.parent, absolute, text, temp_suffix=".tmp")


class MetricsServer:
    """`/metrics` on `service.metrics_listen`, answered on its own thread at each scrape."""

    def __init__(self, listen: Listen, produce: Callable[[], Snapshot]) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(produce))
        self.listen = listen
        self._server, self._thread = start_http_server(listen.port, listen.host, registry)
        self.port = int(self._server.server_address[1])
        event("metrics_listening", address=str(Listen(listen.host, self.port)))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _Collector:
    def __init__(self, produce: Callable[[], Snapshot]) -> None:
        self._produce = produce
        self._lock = threading.Lock()  # two scrapes at once read the catalog one after another

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._produce()
        yield from _families(snap)


def _families(snap: Snapshot) -> Iterator[Metric]:
    fig, state = snap.figures, snap.state
    info = InfoMetricFamily("ckpt_daemon", "The ckpt-daemon version and its platform.")
    info.add_metric(
        [],
        {
            "version": _version(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
    )
    yield info

    if snap.stage_jobs:
        stages = GaugeMetricFamily(
            "ckpt_stage_jobs",
            "The pipeline's jobs by stage and state (pending: the queue's depth).",
            labels=["stage", "state"],
        )
        yield _filled(stages, snap.stage_jobs)
    yield from _stage_families(state.get("stages") or {})

    status = GaugeMetricFamily(
        "ckpt_checkpoints", "Checkpoint rows in the catalog by status.", labels=["status"]
    )
    yield _filled(status, fig.by_status)

    size = GaugeMetricFamily(
        "ckpt_bytes",
        "Bytes on disk by root and kind (checkpoint, inference_artifact, version, trash).",
        labels=["root", "kind"],
    )
    yield _filled(size, fig.bytes)

    free = GaugeMetricFamily(
        "ckpt_root_free_bytes", "Free bytes for unprivileged users (statvfs).", labels=["root"]
    )
    yield _filled(free, {root: n for root, n in snap.free.items() if n is not None})
    threshold = GaugeMetricFamily(
        "ckpt_root_min_free_bytes",
        "The disk guard's min_free threshold (0: none).",
        labels=["root"],
    )
    yield _filled(threshold, snap.min_free)

    latency = HistogramMetricFamily(
        "ckpt_index_latency_seconds",
        "Seconds from a checkpoint's mtime to its indexed row (rows on disk now).",
    )
    latency.add_metric(
        [],
        [(_le(bound), n) for bound, n in fig.latency.buckets],
        sum_value=fig.latency.total,
    )
    yield latency

    helps = {
        "indexed": "Checkpoints indexed (new or changed bytes), all time.",
        "trashed": "Checkpoints moved to the trash, all time.",
        "purged": "Checkpoints deleted from the trash, all time.",
        "demoted": "Checkpoints replaced by their inference artifact (retention), all time.",
        "compressed": "Checkpoints recompressed in place, all time.",
        "split": "Inference artifacts written, all time.",
        "capture_skipped": "Generations not kept as a version for lack of free space "
        "(versions.reserve), all time.",
        "tiered": "Checkpoints uploaded to the object store, verified and recorded, all time.",
    }
    for name, text in helps.items():
        yield CounterMetricFamily(f"ckpt_{name}", text, value=fig.totals.get(name, 0))

    yield from _remote_families(snap)

    failed = CounterMetricFamily(
        "ckpt_actions_failed", "Audited acts that failed, by action, all time.", labels=["action"]
    )
    yield _filled(failed, fig.failed)

    errors = CounterMetricFamily(
        "ckpt_errors", "Errors of the service since it started, by kind.", labels=["kind"]
    )
    counted = state.get("errors") or {}
    for kind in ERROR_KINDS:
        errors.add_metric([kind], int(counted.get(kind, 0)))
    yield errors

    yield GaugeMetricFamily(
        "ckpt_worker_queue_length",
        "Hints and files waiting to be indexed.",
        value=int(state.get("queue", 0)),
    )
    yield GaugeMetricFamily(
        "ckpt_catalog_disk_full",
        "1 while the service cannot write its catalog for lack of space (it waits, then resumes).",
        value=1.0 if state.get("catalog_disk_full") else 0.0,
    )

    for key, name, text in (
        ("last_scan_time", "ckpt_last_scan_timestamp_seconds", "When the last full scan ended."),
        ("heartbeat_time", "ckpt_heartbeat_timestamp_seconds", "The service's last heartbeat."),
    ):
        if state.get(key) is not None:
            yield GaugeMetricFamily(name, text, value=float(state[key]))
    jobs = GaugeMetricFamily(
        "ckpt_last_success_timestamp_seconds",
        "When each background job last finished without a failure.",
        labels=["job"],
    )
    yield _filled(jobs, state.get("last_ok") or {})


def _stage_families(timings: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    """The pipeline's attempts since the service started: how long each took (done or failed)
    and how many failed (a non-zero exit, a time limit, a refused result line), by stage."""
    if not timings:
        return
    durations = HistogramMetricFamily(
        "ckpt_stage_duration_seconds",
        "Seconds each attempt of a pipeline stage ran, by stage, since the service started.",
        labels=["stage"],
    )
    failures = CounterMetricFamily(
        "ckpt_stage_failures",
        "Attempts of a pipeline stage that failed (retried or not), by stage, since the "
        "service started.",
        labels=["stage"],
    )
    for stage, timing in sorted(timings.items()):
        buckets = [(_le(b), n) for b, n in zip(timing["le"], timing["buckets"], strict=True)]
        buckets.append(("+Inf", timing["count"]))
        durations.add_metric([stage], buckets, sum_value=timing["sum"])
        failures.add_metric([stage], timing["failures"])
    yield durations
    yield failures


def _remote_families(snap: Snapshot) -> Iterator[Metric]:
    """The object store's: bytes uploaded and tier acts failed (all time, from the audit
    events), bytes held there by root, the client's retries since the service started."""
    fig = snap.figures
    yield CounterMetricFamily(
        "ckpt_uploaded_bytes",
        "Bytes uploaded to the object store by tier acts that verified, all time.",
        value=fig.uploaded_bytes,
    )
    yield CounterMetricFamily(
        "ckpt_upload_failures",
        "Tier acts that failed (upload, verification or record; local copy kept), all time.",
        value=fig.failed.get("tier", 0),
    )
    remote = GaugeMetricFamily(
        "ckpt_remote_bytes", "Bytes of verified copies in the object store.", labels=["root"]
    )
    yield _filled(remote, fig.remote_bytes)
    retries = CounterMetricFamily(
        "ckpt_remote_retries",
        "Object store calls retried after a transient fault, since the service started.",
        labels=["store"],
    )
    calls = CounterMetricFamily(
        "ckpt_remote_call_failures",
        "Object store calls that failed after their retries, since the service started.",
        labels=["store"],
    )
    stores = snap.state.get("remote") or {}
    yield _filled(retries, {url: int(c.get("retries", 0)) for url, c in stores.items()})
    yield _filled(calls, {url: int(c.get("failures", 0)) for url, c in stores.items()})


def remote_counters(config: Config) -> dict[str, dict[str, int]]:
    """{store URL: its client's counters} of the stores this process has used (JSON-able)."""
    from ..usecases.tier.locations import uses_remote

    if not uses_remote(config):
        return {}
    from ..usecases.tier.tiering import object_store

    found: dict[str, dict[str, int]] = {}
    for root in config.roots:
        remote = config.remote_for(root)
        if remote is not None and remote.url not in found:
            found[remote.url] = asdict(object_store(remote).counters)
    return found


def service_state(
    *,
    queue: int,
    last_scan_time: float | None,
    last_ok: Mapping[str, float],
    errors: Mapping[str, int],
    heartbeat_time: float | None = None,
    remote: Mapping[str, Mapping[str, int]] | None = None,
    catalog_disk_full: bool = False,
    stages: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The service's part of the metrics: kept live by `ckpt serve` and in every heartbeat
    (for `ckpt metrics`), JSON-able."""
    return {
        "queue": queue,
        "last_scan_time": last_scan_time,
        "last_ok": dict(last_ok),
        "errors": {kind: int(errors.get(kind, 0)) for kind in ERROR_KINDS},
        "heartbeat_time": heartbeat_time,
        "remote": {url: dict(counted) for url, counted in (remote or {}).items()},
        "catalog_disk_full": catalog_disk_full,
        # stage -> its attempts' durations (cumulative buckets, `le`) and failures
        "stages": {name: dict(timing) for name, timing in (stages or {}).items()},
    }


def _filled(family: F, values: Mapping[Any, float]) -> F:
    """`family` with one sample per key of `values` (a label's value, or a tuple of the
    labels' values), in key order."""
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _thresholds(config: Config) -> dict[str, int]:
    from ..usecases.disk_guard import thresholds

    try:
        return thresholds(config)
    except OSError:  # a root gone meanwhile: its gauge says 0 rather than the scrape failing
        return dict.fromkeys((str(r.path) for r in config.roots), 0)


def _free_bytes(root: str) -> int | None:
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ckpt-daemon")
    except PackageNotFoundError:
        return "unknown"
