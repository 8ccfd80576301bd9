"""The web view's connections: a thread each, at most `max_connections` at once, and a deadline
for a whole request.

One thread serving requests in turn, with a timeout per `recv`, was held by one client sending
a header byte every few seconds: every page waited behind it (issue 40). Here each connection
has a thread of its own, so a slow client holds only its own; each `recv` of a request is given
only the time left until the request's deadline (the request line and every header, however
they trickle in), and the answer then has `response_timeout` in all to be sent (a client that
does not read is cut too). A connection beyond the bound is answered 503 at once and closed:
a flood of connections costs threads and memory up to the bound, never more, and the ones
already open are served. Only loopback clients, or ones holding the token, get past the
request line, but any client can open connections: the bound is what stops them."""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import time
from http.server import HTTPServer
from typing import Any

from ..logs import event

MAX_CONNECTIONS = 32  # a few browser tabs of a few users, each opening up to 6 at once
REQUEST_DEADLINE_SECONDS = 10.0  # the request line and the headers, from the connection's start
RESPONSE_TIMEOUT_SECONDS = 10.0  # sending the answer, in all
JOIN_SECONDS = 5.0  # at stop: every open connection is shut down, its thread then ends at once
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 40\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    b"busy: too many connections, retry soon\r\n"
)


class DeadlineReader(io.RawIOBase):
    """The bytes of a socket, each `recv` waiting at most the time left until `deadline`
    (monotonic): past it, `TimeoutError`, which `BaseHTTPRequestHandler` answers by closing
    the connection."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


def reader(sock: socket.socket, deadline_s: float) -> io.BufferedReader:
    """What a request handler reads its request from (its `rfile`)."""
    return io.BufferedReader(DeadlineReader(sock, time.monotonic() + deadline_s))


class BoundedServer(HTTPServer):
    """An HTTP server answering each connection on a thread of its own, at most `max_connections`
    at once. `stop_connections()` (after `shutdown()`) shuts every open one and waits for their
    threads, so that nothing reads the catalog after the server is stopped."""

    allow_reuse_address = True
    request_queue_size = 64  # a burst of connections is accepted (and refused past the bound)

    def __init__(
        self,
        address: tuple[str, int],
        handler: Any,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._open: dict[socket.socket, threading.Thread] = {}
        self._full = False  # logged once each time the bound is reached, not per refusal
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request, client_address)
            return
        thread = threading.Thread(
            target=self._serve_one, args=(request, client_address), name="web-request", daemon=True
        )
        with self._lock:
            self._open[request] = thread
            self._full = False
        thread.start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._lock:
                self._open.pop(request, None)
            self._slots.release()

    def _refuse(self, request: Any, client_address: Any) -> None:
        with self._lock:
            first, self._full = not self._full, True
        if first:
            event(
                "web_connections_full",
                level=logging.WARNING,
                bound=self.max_connections,
                client=str(client_address[0]),
            )
        with contextlib.suppress(OSError):
            request.settimeout(1.0)
            request.sendall(BUSY)
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        event("web_request_failed", level=logging.WARNING, client=str(client_address[0]))

    def stop_connections(self) -> None:
        with self._lock:
            open_now = dict(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + JOIN_SECONDS
        for thread in open_now.values():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
