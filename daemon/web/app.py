"""The web view's requests → responses: routing, the JSON endpoints and the HTML pages, drawn
by Jinja2 templates with autoescaping (every run, path and metric name is hostile: a name
holding markup is shown as typed, control characters and bidi overrides as their escapes,
exactly as the CLI prints them with `core.text.visible`). The only Jinja2 import.

Read-only by construction: a route only reads (`web.pages`); the server answers GET and HEAD,
and nothing else."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from ..api import Catalog
from ..core.errors import CkptError, NotFound, UsageError
from ..core.history import GLYPHS, MARKS
from ..core.text import metric_text, relative_path, visible
from ..core.units import format_size, iso_utc
from ..logs import event
from . import pages

HERE = Path(__file__).resolve().parent
STATIC = {  # name -> (file, content type); nothing else is ever read from the disk
    "style.css": (HERE / "static" / "style.css", "text/css; charset=utf-8"),
    "live.js": (HERE / "static" / "live.js", "text/javascript; charset=utf-8"),
}
# No inline script or style runs, nothing is fetched from elsewhere: a name that slipped
# through escaping still could not execute.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
CACHE_SECONDS = 10.0  # for the TIMELY pages
TIMELY = {"/disk", "/hosts"}  # free space and heartbeats: not in the audit log
CACHE_PAGES = 64
NAV = (("/", "Runs"), ("/disk", "Disk"), ("/hosts", "Hosts"), ("/log", "Audit log"))


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes


class WebApp:
    """One per server; `catalog` is opened on the serving thread at its first request (an
    SQLite connection belongs to the thread that made it)."""

    def __init__(
        self, open_catalog: Callable[[], Catalog], *, cache_seconds: float = CACHE_SECONDS
    ) -> None:
        self._open = open_catalog
        self._cache_seconds = cache_seconds
        self._catalog: Catalog | None = None
        self._env = _environment()
        self._cache: dict[Any, tuple[str, float, Response]] = {}
        self._clock = time.monotonic

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = self._open()
        return self._catalog

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def warm(self) -> None:
        """Draw the overview once before the first request: every run's summary is read then
        (100,000 checkpoints: about a second) and kept, so the first visitor does not wait for
        it; later pages read again only the runs that changed. A failure is the page's: logged,
        and the first request meets it again."""
        self.respond("/", {})

    def respond(self, path: str, params: Mapping[str, str]) -> Response:
        """The page at `path`; a page already drawn at the catalog's present state (the same
        newest audit event and checkpoint count) is answered again without reading it."""
        try:
            if path.startswith("/static/") or path == "/api/changes":
                return self._route(path, params)
            key = (path, tuple(sorted(params.items())))
            state = _changes_key(pages.changes(self.catalog))
            hit = self._cache.get(key)
            if hit is not None and hit[0] == state and self._fresh(path, hit[1]):
                return hit[2]
            response = self._route(path, params, state)
            if response.status == 200:
                self._cache[key] = (state, self._clock(), response)
                while len(self._cache) > CACHE_PAGES:
                    self._cache.pop(next(iter(self._cache)))
            return response
        except UsageError as exc:
            return self._error(path, 400, str(exc))
        except NotFound as exc:
            return self._error(path, 404, str(exc))
        except CkptError as exc:
            return self._error(path, 500, str(exc))
        except Exception as exc:  # one bad page must not take the view (or the daemon) down
            event("web_page_failed", level=40, path=path, error=repr(exc))
            return self._error(path, 500, f"{type(exc).__name__} (see the daemon's log)")

    def _fresh(self, path: str, drawn_at: float) -> bool:
        """Free space and heartbeats move without an audit event: those pages live at most
        `cache_seconds`; the others as long as the catalog's state (0: nothing is kept)."""
        if self._cache_seconds <= 0:
            return False
        if path.removeprefix("/api") in TIMELY:
            return self._clock() - drawn_at < self._cache_seconds
        return True

    def _route(self, path: str, params: Mapping[str, str], state: str = "") -> Response:
        if path.startswith("/static/"):
            return _static(path.removeprefix("/static/"))
        as_json = path.startswith("/api/")
        name = path.removeprefix("/api") if as_json else path
        if as_json and name == "/changes":
            return _json(200, pages.changes(self.catalog))
        page = self._page(name, params)
        if as_json:
            return _json(200, page.json_doc())
        return self._html(200, page, name, params, state)

    def _page(self, name: str, params: Mapping[str, str]) -> pages.Page:
        cat = self.catalog
        if name in ("/", "/runs"):
            return pages.overview(cat, params)
        if name == "/run":
            return pages.run_page(cat, _required(params, "run"), params)
        if name == "/checkpoint":
            return pages.checkpoint_page(cat, _required(params, "id"))
        if name == "/disk":
            return pages.disk_page(cat, params)
        if name == "/hosts":
            return pages.hosts_page(cat)
        if name == "/log":
            return pages.log_page(cat, params)
        raise NotFound(f"no page {name!r}: the pages are /, /run, /checkpoint, /disk, /hosts, /log")

    def _html(
        self, status: int, page: pages.Page, name: str, params: Mapping[str, str], state: str
    ) -> Response:
        """The page's HTML; `state`: the catalog's state it was drawn at (read before the page,
        so a change meanwhile makes the next poll draw it again)."""
        roots = sorted((str(r.path) for r in self.catalog.config.roots), key=len, reverse=True)
        return self._render(
            page.template,
            status,
            title=page.title,
            doc=page.doc,
            params=dict(params),
            roots=roots,
            marks=MARKS,
            glyphs=GLYPHS | pages.VIEW_GLYPHS,
            view_marks=tuple(pages.VIEW_GLYPHS),
            request_path=name + ("?" + urlencode(params) if params else ""),
            changes=state,
            **page.view,
        )

    def _error(self, path: str, status: int, message: str) -> Response:
        if path.startswith("/api/"):
            return _json(status, {"error": message, "status": status})
        return self._render(
            "error.html",
            status,
            title=f"Error {status}",
            status=status,
            message=message,
            params={},
            request_path="",
            changes="",
        )

    def _render(self, template: str, code: int, /, **values: Any) -> Response:
        text = self._env.get_template(template).render(nav=NAV, **values)
        return Response(code, "text/html; charset=utf-8", text.encode())


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,  # a typo in a template is an error, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        visible=visible,
        size=format_size,
        metric=lambda v: metric_text(v if v is None or math.isfinite(v) else None),
        when=lambda seconds: iso_utc(seconds) if seconds is not None else "-",
        relative=lambda path, roots: visible(relative_path(str(path), roots)),
        query=lambda params, **changed: (
            "?" + urlencode({k: v for k, v in {**params, **changed}.items() if v not in (None, "")})
        ),
    )
    return env


def _changes_key(doc: Mapping[str, Any]) -> str:
    """What live.js compares: the same text it builds from `/api/changes`."""
    return f"{doc['event']}:{doc['checkpoints']}:{doc['jobs']}"


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise UsageError(f"missing query parameter {name!r}")
    return value


def _static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no file {name!r}")
    file, content_type = STATIC[name]
    return Response(200, content_type, file.read_bytes())


def _json(status: int, doc: Any) -> Response:
    body = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    return Response(status, "application/json; charset=utf-8", body.encode())
