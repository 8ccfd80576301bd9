"""What each page of the web view shows, read through the same `api.Catalog` calls the `ckpt`
commands make: the CLI and the web view are two skins over one set of use cases. Each page is a
JSON document (the `--json` documents of the matching commands, nested under their command's
name; fields are only ever added) plus what its template needs to draw it.

Every query parameter is checked here: an unknown sort key or metric is a `UsageError` naming
what exists (the server answers 400 with it)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..api import Catalog
from ..api.pipeline import job_json
from ..core.errors import UsageError
from ..core.history import MarkedCheckpoint, history_json, series, series_json
from ..core.observability import DEMOTED_REASON
from ..core.query import default_mode
from ..core.svg_curve import Curve, curve
from ..core.usage import usage_json
from ..core.views import run_json
from .curve_markers import markers_svg

if TYPE_CHECKING:
    from ..core.model import Checkpoint

StageJob = Any  # a job of the queue (catalog.store_stage_jobs), as the API hands it over

Doc = dict[str, Any]
Params = Mapping[str, str]
RUN_SORTS = ("name", "checkpoints", "bytes", "newest", "last_save", "best")
LOG_LIMIT, MAX_LOG_LIMIT = 200, 10_000
TABLE_ROWS, MAX_TABLE_ROWS = 100, 1_000_000  # a run page's table: its newest checkpoints
TRASH_ROWS = 200  # the disk page's trash table: its newest
# Marks only the view shows (`core.history.MARKS` are the CLI's too), with their glyphs.
VIEW_GLYPHS = {"demoted": "▣", "remote": "☁"}
GUARD_ACTOR = "daemon:disk-guard"
GUARD_EVENTS = 50  # the disk page's: the guard's newest acts
OUTPUT_LINES, OUTPUT_CHARS = 20, 4000  # of a failed stage's output, on its checkpoint's page


@dataclass(frozen=True)
class Page:
    template: str
    title: str
    doc: Doc  # the JSON endpoint's document, or what the HTML shows of it (see `whole`)
    view: dict[str, Any] = field(default_factory=dict)  # what only the HTML needs
    # The whole JSON document, when the HTML needs only `doc` of it: made for the JSON alone
    # (a run page's rows of every checkpoint are not drawn: its table shows 100).
    whole: Callable[[], Doc] | None = None

    def json_doc(self) -> Doc:
        return self.whole() if self.whole is not None else self.doc


def overview(cat: Catalog, params: Params) -> Page:
    """Every run (`ckpt runs --json`, each with `flags`, `last_save_unfinished` and
    `best_metric` added: the run's best checkpoint by `metric`, as `ckpt runs` finds it, and its
    value), filtered by `q` (a substring of the run's name) and sorted by `sort` (`-` first:
    descending). Every figure comes from the catalog's aggregates (`Catalog.runs`): nothing is
    read per checkpoint."""
    found = cat.runs()
    metric = params.get("metric") or _default_metric(found)
    if metric and found and not any(metric in r.best for r in found):
        cat.check_metric("metric", metric)  # a typo names the metrics there are
    rows = []
    needle = params.get("q", "")
    for r in found:
        if needle and needle not in r.name:
            continue
        doc = run_json(r)
        doc["flags"] = dict(r.flags)
        doc["last_save_unfinished"] = r.last_save_unfinished
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
    retention planner's reasons: why each checkpoint is kept, what the next prune would do),
    the plotted series (`ckpt plot --json`'s) and `marks`: per checkpoint id, its marks with
    the two only the view shows (`demoted`: trashed for its inference artifact, which stays;
    `remote`: a verified copy in object storage), its `location` and `remote_url` (as
    `ckpt list --json`). The table shows the newest `rows` checkpoints (default 100), with a
    link to more: a run of thousands is never drawn whole unless asked."""
    asked = [m for m in params.get("metrics", "").split(",") if m]
    shown = _int(params.get("rows"), "rows", TABLE_ROWS, MAX_TABLE_ROWS)
    history = cat.history(run, asked)
    metric = params.get("metric") or (history.metrics[0][0] if history.metrics else "")
    if metric and metric not in dict(history.metrics):
        history = cat.history(run, [metric, *[m for m, _ in history.metrics if m != metric]])
    try:
        plan = cat.plan_prune([run], history=history).as_dict()  # its rows not read again
    except UsageError as exc:  # no retention configured: nothing would be pruned, and why
        plan = {"dry_run": True, "runs": [], "skipped": [], "failures": [], "none": str(exc)}
    decided = {
        d["id"]: d
        for p in plan["runs"]
        if p["run"] == run or p["run"].startswith(run + "/")
        for d in p["decisions"]
    }
    drawn = series(history, metric) if metric else None
    marked = history.checkpoints
    marks = _view_marks(cat, marked)
    drawn_rows = marked[-shown:]
    jobs = cat.checkpoint_jobs([m.checkpoint.id for m in drawn_rows])
    rows = [
        {
            "marked": m,
            "decision": decided.get(m.checkpoint.id),
            "marks": marks[m.checkpoint.id],
            "stages": _compact_stages(m.checkpoint, jobs.get(m.checkpoint.id, [])),
        }
        for m in drawn_rows
    ]
    table = {"rows": len(rows), "of": len(marked)}

    def whole() -> Doc:  # the JSON's: every checkpoint's row, series and marks (not drawn)
        return {
            "history": history_json(history),
            "prune_plan": plan,
            "series": series_json(drawn) if drawn else None,
            "marks": {str(i): v for i, v in marks.items()},
            "table": table,
        }

    chart: Curve | None = curve(drawn) if drawn else None
    view = {
        "run": run,
        "history": history,
        "rows": rows,
        "chart": chart,
        "markers": markers_svg(chart, marks) if chart else "",
        "metric": metric,
        "more_rows": min(len(marked), 4 * shown) if len(marked) > shown else None,
        "has_stages": bool(jobs),
    }
    doc = {"prune_plan": plan, "table": table}  # what the HTML shows of the JSON
    return Page("run.html", f"Run {run}", doc, view, whole)


def _view_marks(cat: Catalog, marked: list[MarkedCheckpoint]) -> dict[int, dict[str, Any]]:
    """Per checkpoint: its marks (`core.history`'s, then `demoted` and `remote`), location."""
    places = cat.locations([m.checkpoint for m in marked])
    out: dict[int, dict[str, Any]] = {}
    for m in marked:
        c = m.checkpoint
        location, url = places.get(c.id, ("local", None))
        extra = []
        if c.status.value in ("trashed", "purged") and DEMOTED_REASON in (c.reason or ""):
            extra.append("demoted")
        if location in ("remote", "both"):
            extra.append("remote")
        out[c.id] = {"marks": [*m.marks, *extra], "location": location, "remote_url": url}
    return out


def checkpoint_page(cat: Catalog, ref: str) -> Page:
    """One checkpoint: `ckpt show --json`, its model card (`ckpt describe --format json`; the
    page shows the card's text as `ckpt describe --format txt` prints it) and its pipeline
    stages (`stages`: each job as `ckpt jobs --json` has it, with `duration_seconds`,
    `current` (of its present bytes, not an earlier generation's) and, for a failed one,
    `output_tail`: the last lines it printed)."""
    from ..core.card_layouts import as_json, text
    from ..core.views import checkpoint_json

    found = cat.get(ref)
    facts = cat.describe(found.id)
    stages = [_stage_doc(job, found) for job in cat.checkpoint_jobs([found.id]).get(found.id, [])]
    stages.sort(key=lambda d: not d["current"])  # its present bytes' first, then earlier ones'
    doc = {
        "show": checkpoint_json(found, detailed=True),
        "describe": as_json(facts),
        "stages": stages,
    }
    view = {"checkpoint": found, "card_text": text(facts)}
    return Page("checkpoint.html", f"Checkpoint {found.id}", doc, view)


def disk_page(cat: Catalog, params: Params | None = None) -> Page:
    """Bytes by root and run (`ckpt du --json`), the trash (`ckpt trash list --json`), each
    guarded filesystem's free space, `min_free` and state (`ckpt status --json`'s `disk`) and
    the disk guard's last acts (its audit events). The page's trash table shows the last
    `trash` rows (default 200), the JSON all of them."""
    from ..usecases.disk_guard import status as disk_status

    shown = _int((params or {}).get("trash"), "trash", TRASH_ROWS, MAX_TABLE_ROWS)
    health = cat.status()
    guard = cat.log(limit=GUARD_EVENTS, actor=GUARD_ACTOR)  # its own, in SQL: not every event
    trash = cat.trash()
    doc = {
        "du": usage_json(cat.du()),
        "trash": trash,
        "disk": disk_status(cat.config, health["disk"], running=bool(health["running"])),
        "guard_events": guard,
    }
    more = min(len(trash), 4 * shown) if len(trash) > shown else None
    return Page("disk.html", "Disk", doc, {"trash_rows": trash[-shown:], "more_trash": more})


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
    wanted = {k: params.get(k) or None for k in ("action", "state", "actor")}
    events = cat.log(params.get("run") or None, limit, **wanted)  # filtered in SQL
    filters = {k: params.get(k, "") for k in ("run", "action", "state", "actor")}
    return Page("log.html", "Audit log", {"events": events, "filters": filters, "limit": limit})


def changes(cat: Catalog) -> Doc:
    """What the pages poll: the newest audit event's id (every index, trash, restore, purge
    and pin is one), the count of checkpoints and the pipeline's jobs' signature; a page
    reloads its content when one of them moves."""
    newest = cat.log(limit=1)
    return {
        "event": newest[-1]["id"] if newest else 0,
        "checkpoints": cat.status()["checkpoints"],
        "jobs": cat.jobs_changed(),  # a stage's job moved: the pages showing it change
    }


def _stage_doc(job: StageJob, checkpoint: Checkpoint) -> Doc:
    """A job as the checkpoint page shows it: `ckpt jobs --json`'s document, how long its last
    attempt ran, whether it is of the checkpoint's present bytes, and a failed one's last
    lines of output."""
    doc = job_json(job)
    doc["duration_seconds"] = _seconds_between(job.started_at, job.ended_at)
    doc["current"] = job.generation == checkpoint.hash
    lines = (job.output or "").rstrip("\n").splitlines()[-OUTPUT_LINES:]
    doc["output_tail"] = "\n".join(lines)[-OUTPUT_CHARS:] if job.state == "failed" else None
    return doc


def _compact_stages(checkpoint: Checkpoint, jobs: list[StageJob]) -> list[tuple[str, str]]:
    """(stage, state) of the jobs of the checkpoint's present bytes, skipped ones aside (a
    decision, not work): the run table's stages column."""
    return [
        (j.stage, j.state) for j in jobs if j.generation == checkpoint.hash and j.state != "skipped"
    ]


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    took = dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)
    return round(took.total_seconds(), 3)


def _default_metric(found: list[Any]) -> str:
    names = {m for r in found for m in r.best}
    for preferred in ("val_loss", "loss"):
        if preferred in names:
            return preferred
    return min(names) if names else ""


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
