"""A real S3 API server on loopback for the object-storage tests: moto's server mode
(`ThreadedMotoServer`, Werkzeug on 127.0.0.1), started by the suite itself; nothing leaves the
machine. Its state lives in this process, so it survives a stop and a start on the same port
(a service outage mid-upload)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

CREDENTIALS = {  # the standard AWS chain's environment half: what `ckpt` reads them from
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-never-logged",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """`ignore_conditional_writes`: moto behind a WSGI layer that drops the `If-None-Match`
    header before moto sees it, as an S3-compatible service that accepts the header and ignores
    it does (docs/object-storage.md, "Stores that ignore conditional writes")."""

    def __init__(self, *, ignore_conditional_writes: bool = False) -> None:
        self.port = free_port()
        self.ignore_conditional_writes = ignore_conditional_writes
        self._server = _moto_server(self.port, ignore_conditional_writes)
        self.running = False
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if not self.running:
            self._server = _moto_server(self.port, self.ignore_conditional_writes)
            self._server.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            self.running = True

    def stop(self) -> None:
        if self.running:
            self._server.stop()
            self.running = False

    def client(self) -> Any:
        import boto3

        for name, value in CREDENTIALS.items():
            os.environ.setdefault(name, value)
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1")

    def bucket(self, name: str) -> Any:
        client = self.client()
        client.create_bucket(Bucket=name)
        return client


def _moto_server(port: int, ignore_conditional_writes: bool) -> Any:
    from moto.server import ThreadedMotoServer

    if not ignore_conditional_writes:
        return ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    class IgnoringIfNoneMatch(ThreadedMotoServer):  # type: ignore[misc]
        def _server_entry(self) -> None:  # ThreadedMotoServer's, the app wrapped
            app = DomainDispatcherApplication(create_backend_app)

            def ignoring(environ: dict[str, Any], start_response: Any) -> Any:
                environ.pop("HTTP_IF_NONE_MATCH", None)
                return app(environ, start_response)

            self._server = make_server(self._ip_address, self._port, ignoring, True)
            self._server_ready_event.set()
            self._server.serve_forever()

    return IgnoringIfNoneMatch(ip_address="127.0.0.1", port=port, verbose=False)
