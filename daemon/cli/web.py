"""`ckpt web`: the read-only web view in the foreground, without the daemon (`web.server`)."""

from __future__ import annotations

import contextlib

import click

from ..core.errors import ConfigError, UsageError
from .context import Context, pass_context
from .output import echo

DEFAULT_LISTEN = "127.0.0.1:9465"


@click.command()
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Where to serve it. Default: the config's service.web_listen, else "
    f"{DEFAULT_LISTEN}. An address other than loopback needs service.web_token_file.",
)
@click.option("--open", "open_browser", is_flag=True, help="Open it in the default browser.")
@pass_context
def web(obj: Context, listen: str | None, open_browser: bool) -> None:
    """Serve the web view of the catalog until Ctrl-C: runs, each run's curve and checkpoints
    with why each is kept and what the next prune would do, model cards, disk, hosts and the
    audit log, each page also as JSON under /api/. Read-only: it changes nothing. `ckpt
    serve` serves the same view when service.web_listen is set.

    \b
    Example:  ckpt web --open
              ckpt web --listen 127.0.0.1:8080
    """
    import dataclasses

    from ..settings.operations import metrics_listen
    from ..settings.web_view import WebView, is_loopback

    obj.require_catalog()
    config = obj.config()
    view = config.web
    if listen is not None or view is None:
        address = metrics_listen(listen or DEFAULT_LISTEN, "--listen")
        assert address is not None
        token_file = view.token_file if view is not None else None
        if token_file is None and not is_loopback(address.host):
            raise UsageError(
                f"--listen {address}: not a loopback address, so a token is required: set "
                "service.web_token_file in the config"
            )
        view = WebView(address, token_file)
    config = dataclasses.replace(config, web=view)
    try:
        from ..web.server import WebServer
    except ImportError as exc:
        raise UsageError(f"ckpt web needs Jinja2: pip install 'ckpt-daemon[web]' ({exc})") from exc
    from ..api import catalog_of

    try:
        server = WebServer(view, lambda: catalog_of(config))
    except OSError as exc:
        raise ConfigError("--listen", f"cannot listen on {view.listen}: {exc}") from exc
    asks = "a token is required" if server.token else "no token: this host only"
    echo(f"ckpt web: {server.url} (read-only; {asks}; Ctrl-C stops)", err=True)
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve()
