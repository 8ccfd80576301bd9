"""`ckpt metrics`: the Prometheus metrics that `ckpt serve` serves on `/metrics`, printed or
written for node_exporter's textfile collector."""

from __future__ import annotations

from pathlib import Path

import click

from .context import Context, pass_context
from .output import echo


@click.command()
@click.option(
    "--textfile",
    metavar="PATH",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to PATH atomically (temp file + rename), for node_exporter's textfile "
    "collector (name it *.prom), instead of printing.",
)
@pass_context
def metrics(obj: Context, textfile: Path | None) -> None:
    """The Prometheus metrics: the catalog's figures and the running service's state.

    The same text as `ckpt serve`'s /metrics (service.metrics_listen), with the service's
    part (queue, errors, job times) from its newest heartbeat. docs/service.md lists every metric.

    \b
    Example:  ckpt metrics --textfile /var/lib/node_exporter/textfile/ckpt.prom
    """
    from ..catalog.store import Store
    from ..service import exporter

    config = obj.config()
    obj.require_catalog()
    with obj.new_catalog_notice():
        store = Store(config.database, named_roots=config.named_roots(), node=config.node_name)
    try:
        state = exporter.heartbeat_state(store)
        text = exporter.metrics_text(exporter.snapshot(config, store, state))
    finally:
        store.close()
    if textfile is not None:
        exporter.write_textfile(textfile, text)
        return
    for line in text.decode().splitlines():
        echo(line)
