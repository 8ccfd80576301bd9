"""Web view latency: p95 per page on a 10,000-checkpoint catalog (< 200 ms) and the runs
overview on 100,000 (< 300 ms), over real HTTP to the view's own server (`web.server`, the one
`ckpt serve` runs), with a retention policy configured so the run page plans a prune.

The catalogs are bench/catalog_scale.py's, built through the Store (Alembic migrations to
head) and filled by bulk inserts: 10 and 100 runs of 1,000 checkpoints, 4 metrics each, a
sparse file per row (cached in bench/out/catalog/, keyed by the schema head), copied with an
`indexed` audit event per checkpoint (`-web.db`). Each page is asked
N times in turn, round-robin, after one warm-up request each; two figures per page: `cached`
(the view as it runs: a page already drawn at the catalog's present state is answered again)
and `drawn` (the page cache off, and before each request a real change to the catalog: a
checkpoint of exp3 pinned or unpinned through the API, not timed: what the first visitor after
a change waits, while run exp3 trains). Both are checked against the targets. `first`: the
drawn view's first request for each page after it started (imports, templates, and every run's
summary, which it then keeps): shown, not checked.

    python3 bench/web_pages.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from _common import OUT, Check, report, table
from catalog_scale import QUICK_RUNS, RUNS, build_catalog

RETENTION = "retention: {keep_last: 20, keep_every: 50, keep_best: {metric: val_loss, n: 5}}\n"
CHANGED_RUN = "exp3"  # the run the drawn pages' catalog changes are made in
PAGES_10K = ("/", "/run?run=exp3", "/checkpoint?id=2500", "/disk", "/hosts", "/log")


def config_with_retention(config: Path) -> Path:
    """bench/catalog_scale.py's catalog, copied once with an audit log of one `indexed` event
    per checkpoint (as a catalog the daemon filled has: catalog_scale's has none, and the log
    page and the disk guard's events read the log), and a retention policy."""
    text = config.read_text()
    found = re.search(r"database: sqlite:///(\S+)", text)
    assert found is not None, text
    source = Path(found[1])
    copy = source.with_name(source.stem + "-web.db")
    done = copy.with_suffix(".ok")
    if not (done.exists() and copy.exists()):
        for stale in copy.parent.glob(copy.name + "*"):
            stale.unlink()
        with sqlite3.connect(source) as reading, sqlite3.connect(copy) as writing:
            reading.backup(writing)
            writing.execute(
                "INSERT INTO events (at, action, state, checkpoint_id, path, bytes, actor)"
                " SELECT first_seen_at, 'indexed', 'done', id, path, size_bytes,"
                " 'daemon:indexer' FROM checkpoints ORDER BY id"
            )
        done.touch()
    out = config.with_name(config.stem + "-web.yaml")
    out.write_text(text.replace(str(source), str(copy)) + RETENTION)
    return out


def p95(values: list[float]) -> float:
    return (
        statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]
    )


def catalog_change(config: Path) -> Callable[[], None]:
    """One real change before each drawn request (not timed): a checkpoint of exp3 pinned, then
    unpinned, through the API on a catalog connection of its own, as another process acts. It
    moves the audit log and exp3's revision: the run page of exp3 and the overview's summary of
    exp3 are read again, as when a run trains (the other runs' summaries are the view's kept
    ones)."""
    from ckpt_daemon.api import catalog_of
    from ckpt_daemon.settings import config as config_module

    cat = catalog_of(config_module.load(str(config)))
    target = cat.history(CHANGED_RUN).checkpoints[0].checkpoint.id
    pinned = [cat.get(str(target)).pinned]

    def change() -> None:
        pinned[0] = not pinned[0]
        cat.pin(target, pinned[0])

    return change


def measure(
    config: Path,
    pages: tuple[str, ...],
    repeats: int,
    cache_seconds: float,
    change: Callable[[], None] | None = None,
    first: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    """Each page's times over `repeats` rounds; `first`: filled with each page's warm-up time
    (the view's first request for it after its start)."""
    first = {} if first is None else first
    from ckpt_daemon.api import catalog_of
    from ckpt_daemon.settings import config as config_module
    from ckpt_daemon.settings.operations import Listen
    from ckpt_daemon.settings.web_view import WebView
    from ckpt_daemon.web.server import WebServer

    loaded = config_module.load(str(config))
    server = WebServer(WebView(Listen("127.0.0.1", 0)), lambda: catalog_of(loaded))
    server.app._cache_seconds = cache_seconds
    server.start()
    times: dict[str, list[float]] = {p: [] for p in pages}
    try:
        for page in pages:  # warm: imports, templates, the SQLite page cache, every run's summary
            start = time.perf_counter()
            urllib.request.urlopen(server.url.rstrip("/") + page, timeout=300).read()
            first[page] = time.perf_counter() - start
        for _ in range(repeats):
            for page in pages:
                if change is not None:
                    change()
                start = time.perf_counter()
                with urllib.request.urlopen(server.url.rstrip("/") + page, timeout=300) as r:
                    r.read()
                    assert r.status == 200, page
                times[page].append(time.perf_counter() - start)
    finally:
        server.stop()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    args = parser.parse_args()
    repeats = args.repeats or (5 if args.quick else 20)
    small = config_with_retention(build_catalog(OUT / "catalog", QUICK_RUNS))
    checks, rows, facts = [], [], {}
    for label, config, pages, target in (
        ("10k", small, PAGES_10K, 200.0),
        *(
            ()
            if args.quick
            else (
                (
                    "100k",
                    config_with_retention(build_catalog(OUT / "catalog", RUNS)),
                    ("/",),
                    300.0,
                ),
            )
        ),
    ):
        cached = measure(config, pages, repeats, cache_seconds=10.0)
        started: dict[str, float] = {}
        drawn = measure(
            config,
            pages,
            repeats,  # as many as cached: a drawn page costs tens of milliseconds now
            cache_seconds=0.0,
            change=catalog_change(config),
            first=started,
        )
        for page in pages:
            hit, miss = p95(cached[page]) * 1000, p95(drawn[page]) * 1000
            hit50 = statistics.median(cached[page]) * 1000
            miss50 = statistics.median(drawn[page]) * 1000
            cold = started[page] * 1000
            rows.append(
                (
                    label,
                    page,
                    f"{hit50:.1f}",
                    f"{hit:.1f}",
                    f"{miss50:.0f}",
                    f"{miss:.0f}",
                    f"{cold:.0f}",
                )
            )
            facts[f"{label} {page} ms, the first after the view started"] = round(cold)
            facts[f"{label} {page} ms (cached p50, p95; drawn p50, p95)"] = [
                round(hit50, 1),
                round(hit, 1),
                round(miss50),
                round(miss),
            ]
            for how, value in (("cached", hit), ("drawn", miss)):
                name, bound = f"{label} {page} p95 {how}", f"< {target:.0f}"
                checks.append(Check(name, value, bound, "ms", value < target))
    table(("catalog", "page", "cached p50", "cached p95", "drawn p50", "drawn p95", "first"), rows)
    return report("web_pages", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
