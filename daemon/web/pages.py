"""What each page of the web view shows, read through the same `api.Catalog` calls the `ckpt`
commands make: the CLI and the web view are two skins over one set of use cases. Each page is a
JSON document (the `--json` documents of the matching commands, nested under their command's
name; fields are only ever added) plus what its template needs to draw it.

Every query parameter is checked here: an unknown sort key or metric is a `UsageError` naming
what exists (the server answers 400 with it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api import Catalog
from ..core.errors import UsageError
from ..core.history import history_json, series, series_json
from ..core.query import default_mode
from ..core.svg_curve import Curve, curve
from ..core.usage import usage_json
from ..core.views import run_json

Doc = dict[str, Any]
Params = Mapping[str, str]
# Statuses that flag a run on the overview: a save that did not complete, a file gone bad.
FLAG_STATUSES = ("incomplete", "corrupt", "unreadable", "missing")
RUN_SORTS = ("name", "checkpoints", "bytes", "newest", "last_save", "best")
LOG_LIMIT, MAX_LOG_LIMIT = 200, 10_000
GUARD_ACTOR = "daemon:disk-guard"


@dataclass(frozen=True)
class Page:
    template: str
    title: str
    doc: Doc  # the JSON endpoint's document
    view: dict[str, Any] = field(default_factory=dict)  # what only the HTML needs


def overview(cat: Catalog, params: Params) -> Page:
    """Every run (`ckpt runs --json`, each with `flags` and `best_metric` added: the run's best
    checkpoint by `metric`, as `ckpt runs` finds it, and its value),
    filtered by `q` (a substring of the run's name) and sorted by `sort` (`-` first: descending)."""
    found = cat.runs()
    metric = params.get("metric") or _default_metric(found)
    if metric and found and not any(metric in r.best for r in found):
        cat.check_metric("metric", metric)  # a typo names the metrics there are
    flags = _flags(cat)
    rows = []
    needle = params.get("q", "")
    for r in found:
        if needle and needle not in r.name:
            continue
        doc = run_json(r)
        doc["flags"] = flags.get((r.root, r.name), {})
        path = r.best.get(metric) if metric else None
        value = r.best_values.get(metric) if path else None
        doc["best_metric"] = {"metric": metric, "path": path, "value": value}
        rows.append(doc)
    sort = params.get("sort", "name")
    key = sort.removeprefix("-")
    if key not in RUN_SORTS:
        raise UsageError(f"sort {sort!r}: not one of {', '.join(RUN_SORTS)} (- first: descending)")
    rows.sort(key=lambda d: _run_key(d, key), reverse=sort.startswith("-"))
    doc = {"runs": rows, "metric": metric, "sort": sort, "q": needle}
    return Page("overview.html", "Runs", doc)


def run_page(cat: Catalog, run: str, params: Params) -> Page:
    """One run: `ckpt history --json`, `ckpt prune --dry-run --json` of that run (the
    retention planner's reasons: why each checkpoint is kept, what the next prune would do) and
    the plotted series (`ckpt plot --json`'s)."""
    asked = [m for m in params.get("metrics", "").split(",") if m]
    history = cat.history(run, asked)
    metric = params.get("metric") or (history.metrics[0][0] if history.metrics else "")
    if metric and metric not in dict(history.metrics):
        history = cat.history(run, [metric, *[m for m, _ in history.metrics if m != metric]])
    try:
        plan = cat.plan_prune([run]).as_dict()
    except UsageError as exc:  # no retention configured: nothing would be pruned, and why
        plan = {"dry_run": True, "runs": [], "skipped": [], "failures": [], "none": str(exc)}
    decided = {
        d["id"]: d
        for p in plan["runs"]
        if p["run"] == run or p["run"].startswith(run + "/")
        for d in p["decisions"]
    }
    drawn = series(history, metric) if metric else None
    rows = [{"marked": m, "decision": decided.get(m.checkpoint.id)} for m in history.checkpoints]
    doc = {
        "history": history_json(history),
        "prune_plan": plan,
        "series": series_json(drawn) if drawn else None,
    }
    chart: Curve | None = curve(drawn) if drawn else None
    view = {"run": run, "history": history, "rows": rows, "chart": chart, "metric": metric}
    return Page("run.html", f"Run {run}", doc, view)


def checkpoint_page(cat: Catalog, ref: str) -> Page:
    """One checkpoint: `ckpt show --json` and its model card (`ckpt describe --format json`;
    the page shows the card's text as `ckpt describe --format txt` prints it)."""
    from ..core.card_layouts import as_json, text
    from ..core.views import checkpoint_json

    found = cat.get(ref)
    facts = cat.describe(found.id)
    doc = {"show": checkpoint_json(found, detailed=True), "describe": as_json(facts)}
    view = {"checkpoint": found, "card_text": text(facts)}
    return Page("checkpoint.html", f"Checkpoint {found.id}", doc, view)


def disk_page(cat: Catalog) -> Page:
    """Bytes by root and run (`ckpt du --json`), the trash (`ckpt trash list --json`), each
    guarded filesystem's free space, `min_free` and state (`ckpt status --json`'s `disk`) and
    the disk guard's last acts (its audit events)."""
    from ..usecases.disk_guard import status as disk_status

    health = cat.status()
    guard = [e for e in cat.log(limit=MAX_LOG_LIMIT) if e["actor"] == GUARD_ACTOR][-50:]
    doc = {
        "du": usage_json(cat.du()),
        "trash": cat.trash(),
        "disk": disk_status(cat.config, health["disk"], running=bool(health["running"])),
        "guard_events": guard,
    }
    return Page("disk.html", "Disk", doc)


def hosts_page(cat: Catalog) -> Page:
    """The fleet: every daemon of the catalog and its heartbeat (`ckpt status --json`)."""
    from ..settings.config import shown_url
    from ..usecases.disk_guard import status as disk_status

    doc = cat.status()
    doc.update(config=cat.config.source, catalog=shown_url(cat.config.database))
    doc["disk"] = disk_status(cat.config, doc["disk"], running=bool(doc["running"]))
    return Page("hosts.html", "Hosts", doc)


def log_page(cat: Catalog, params: Params) -> Page:
    """The audit log (`ckpt log --json`), newest last, filtered by run, action, state, actor."""
    limit = _int(params.get("limit"), "limit", LOG_LIMIT, MAX_LOG_LIMIT)
    events = cat.log(params.get("run") or None, MAX_LOG_LIMIT)
    for key in ("action", "state", "actor"):
        wanted = params.get(key)
        if wanted:
            events = [e for e in events if e[key] == wanted]
    events = events[-limit:]
    filters = {k: params.get(k, "") for k in ("run", "action", "state", "actor")}
    return Page("log.html", "Audit log", {"events": events, "filters": filters, "limit": limit})


def changes(cat: Catalog) -> Doc:
    """What the pages poll: the newest audit event's id (every index, trash, restore, purge
    and pin is one) and the count of checkpoints; a page reloads its content when either moves."""
    newest = cat.log(limit=1)
    return {"event": newest[-1]["id"] if newest else 0, "checkpoints": cat.status()["checkpoints"]}


def _default_metric(found: list[Any]) -> str:
    names = {m for r in found for m in r.best}
    for preferred in ("val_loss", "loss"):
        if preferred in names:
            return preferred
    return min(names) if names else ""


def _flags(cat: Catalog) -> dict[tuple[str, str], dict[str, int]]:
    """(root, run) -> {status: count} for the statuses that flag a run."""
    flags: dict[tuple[str, str], dict[str, int]] = {}
    for status in FLAG_STATUSES:
        for c in cat.list(status=status):
            counted = flags.setdefault((c.root, c.run), {})
            counted[status] = counted.get(status, 0) + 1
    return flags


def _run_key(doc: Doc, key: str) -> Any:
    if key == "best":
        value = doc["best_metric"]["value"]
        mode = default_mode(doc["best_metric"]["metric"] or "loss")
        return (value is None, (value if mode == "min" else -value) if value is not None else 0)
    value = doc.get(key)
    return (value is None, value if value is not None else 0)


def _int(text: str | None, name: str, default: int, most: int) -> int:
    if text is None or text == "":
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
        raise UsageError(f"{name} {text!r}: expected a whole number from 1 to {most}")
    return int(text)
