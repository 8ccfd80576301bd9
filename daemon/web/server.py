"""The web view's HTTP server: `ckpt serve` runs it on a thread of its own when
`service.web_listen` is set (like `/metrics`), `ckpt web` in the foreground.

Each connection is read on a thread of its own, at most `connections.MAX_CONNECTIONS` at once
(one beyond: 503 at once), each request within a deadline for the whole of it however slowly
its bytes come (`web.connections`): a slow client holds only its own connection. The pages are
drawn one at a time, from one catalog connection: pages only read (SQLite's WAL lets the
indexer write meanwhile), the threads run at a lower CPU priority than the indexer, and a page
that fails answers 500 without touching the service. GET and HEAD only:
every other method is 405. On a non-loopback address every request must carry the token of
`service.web_token_file` (an `Authorization: Bearer` header, or `?token=` once: a cookie then
carries it), compared in constant time."""

from __future__ import annotations

import contextlib
import hmac
import os
import threading
from collections.abc import Callable
from http import cookies
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..api import Catalog, catalog_of
from ..logs import event
from ..settings.config import Config
from ..settings.operations import Listen
from ..settings.web_view import WebView, read_token
from . import connections
from .app import SECURITY_HEADERS, Response, WebApp

COOKIE = "ckpt_web_token"
NICE = 10  # below the indexer: pages never slow indexing down


class WebServer:
    """Serves `view.listen` until `stop()`; `port` is the bound one (0 in the config: a free
    port, named in the `web_listening` log line). `max_connections`, `request_deadline` and
    `response_timeout`: `web.connections`' bounds (the tests make them small)."""

    def __init__(
        self,
        view: WebView,
        open_catalog: Callable[[], Catalog],
        *,
        max_connections: int = connections.MAX_CONNECTIONS,
        request_deadline: float = connections.REQUEST_DEADLINE_SECONDS,
        response_timeout: float = connections.RESPONSE_TIMEOUT_SECONDS,
    ) -> None:
        self.view = view
        self.token = read_token(view)
        self.app = WebApp(open_catalog)
        self.drawing = threading.Lock()  # one page at a time: one catalog connection, one cache
        self.request_deadline, self.response_timeout = request_deadline, response_timeout
        self._httpd = connections.BoundedServer(
            (view.listen.host, view.listen.port), _handler(self), max_connections=max_connections
        )
        self.port = int(self._httpd.server_address[1])
        self.address = Listen(view.listen.host, self.port)
        self._thread: threading.Thread | None = None
        event(
            "web_listening",
            address=str(self.address),
            token="required" if self.token else "none (loopback only)",
        )

    @property
    def url(self) -> str:
        return f"http://{self.address}/"

    def start(self) -> WebServer:
        self._thread = threading.Thread(target=self.serve, name="web", daemon=True)
        self._thread.start()
        return self

    def serve(self) -> None:
        """Until `stop()` (the foreground of `ckpt web`, or the thread of `start`)."""
        with contextlib.suppress(OSError):  # not allowed here: at the daemon's priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        try:
            self.app.warm()
            self._httpd.serve_forever(poll_interval=0.5)
        finally:
            self._httpd.stop_connections()  # no request thread reads the catalog after this
            with self.drawing:
                self.app.close()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def allowed(self, headers: Any, params: dict[str, str]) -> bool:
        if self.token is None:
            return True
        given = [params.get("token", "")]
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given.append(auth.removeprefix("Bearer ").strip())
        jar = cookies.SimpleCookie()
        with contextlib.suppress(cookies.CookieError):
            jar.load(headers.get("Cookie", ""))
        if COOKIE in jar:
            given.append(jar[COOKIE].value)
        expected = self.token.encode()
        # every candidate compared, each in constant time: no early exit to time
        return sum(hmac.compare_digest(g.encode(), expected) for g in given) > 0

    def host_allowed(self, host_header: str | None) -> bool:
        """Without a token, only the names of this host: a page of another site that rebinds
        its DNS name to 127.0.0.1 sends its own name and gets nothing."""
        if self.token is not None:
            return True
        host = (host_header or "").rsplit(":", 1)[0].strip("[]").lower()
        return host in {"localhost", "127.0.0.1", "::1", self.view.listen.host.lower()}


def _handler(server: WebServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ckpt-web"
        sys_version = ""

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # read within the request's deadline instead, however slowly
            self.rfile = connections.reader(self.connection, server.request_deadline)

        def parse_request(self) -> bool:
            parsed = super().parse_request()  # the request line read, the headers here
            self.connection.settimeout(server.response_timeout)  # sendall: in all
            return parsed

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _refuse(self) -> None:
            self._send(Response(405, "text/plain; charset=utf-8", b"read-only: GET, HEAD\n"), True)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

        def _answer(self, *, body: bool) -> None:
            split = urlsplit(self.path)
            params = dict(parse_qsl(split.query, keep_blank_values=True))
            if not server.host_allowed(self.headers.get("Host")):
                self._send(Response(403, "text/plain; charset=utf-8", b"unknown host\n"), body)
                return
            if not server.allowed(self.headers, params):
                text = b"a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN\n"
                self._send(Response(401, "text/plain; charset=utf-8", text), body)
                return
            if "token" in params:  # once: a cookie carries it, the URL (and history) drop it
                rest = {k: v for k, v in params.items() if k != "token"}
                self.send_response(303)
                jar = cookies.SimpleCookie()
                jar[COOKIE] = params["token"]
                jar[COOKIE]["httponly"] = True
                jar[COOKIE]["samesite"] = "Strict"
                jar[COOKIE]["path"] = "/"
                self.send_header("Set-Cookie", jar[COOKIE].OutputString())
                self.send_header("Location", split.path + ("?" + urlencode(rest) if rest else ""))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with server.drawing:
                response = server.app.respond(split.path, params)
            self._send(response, body)

        def _send(self, response: Response, body: bool) -> None:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            for name, value in SECURITY_HEADERS.items():
                self.send_header(name, value)
            if response.status == 405:
                self.send_header("Allow", "GET, HEAD")
            self.end_headers()
            if body:
                self.wfile.write(response.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per request would drown the daemon's log

    return Handler


def start_in_daemon(config: Config) -> WebServer:
    """`ckpt serve`'s web view (`service.WebHost` calls it): its own catalog connection, on a
    thread of its own."""
    assert config.web is not None
    return WebServer(config.web, lambda: catalog_of(config)).start()
