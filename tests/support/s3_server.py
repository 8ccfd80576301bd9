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
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.running = False
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        if not self.running:
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
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
