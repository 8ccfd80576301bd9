"""A real headless Chromium for the web view's tests: Debian's `/usr/bin/chromium`, driven by
Playwright's driver (from its pip wheel). No browser is downloaded: `playwright install` never
runs; a machine without /usr/bin/chromium fails these tests (`apt-get install chromium`)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Nothing but the pages under test: no update checks, sync, first-run or QUIC to the internet.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}


@contextmanager
def chromium() -> Iterator[Any]:
    """A browser context with a fresh profile (its --user-data-dir), closed at the end."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="ckpt-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


def png_facts(data: bytes) -> tuple[tuple[int, int], int]:
    """A PNG's (width, height) and how many distinct colours it holds (a blank page: 1)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20)
        return rgb.size, len(colours) if colours is not None else 1 << 20


def web_page(config: Any, path: str, **params: str) -> tuple[int, Any]:
    """A page of the web view answered in this process (no server, no browser): (status, the
    JSON document for `/api/...`, else the HTML text). The same `WebApp` the server runs."""
    import json

    from ckpt_daemon.api import open_catalog
    from ckpt_daemon.web.app import WebApp

    app = WebApp(lambda: open_catalog(str(config)), cache_seconds=0)
    try:
        answer = app.respond(path, params)
    finally:
        app.close()
    text = answer.body.decode()
    return answer.status, json.loads(text) if path.startswith("/api/") else text
