"""`ckpt restore PATH --version N|--epoch E`: an old generation of a rewritten file back."""

from __future__ import annotations

import click

from ..core.text import relative_path
from ..core.views import checkpoint_json
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json


@click.command()
@click.argument("path")
@click.option("--version", "version", type=int, help="The kept generation (see `ckpt show PATH`).")
@click.option("--epoch", type=int, help="The newest kept generation written at this epoch.")
@json_option("The file's row afterwards, as JSON.")
@pass_context
def restore(obj: Context, path: str, version: int | None, epoch: int | None, as_json: bool) -> None:
    """Put a kept version of the rewritten file PATH back at PATH.

    The generation PATH holds now is kept as a version first (a save not indexed yet is
    indexed then; one still being written: exit 3, nothing changed); the old one is copied
    beside it, verified against its hash and swapped in atomically, and only if PATH is still
    the file that was kept (a trainer saving meanwhile wins: exit 3, nothing changed).
    Audited (`ckpt log`). `ckpt show PATH` lists the versions kept (`ckpt trash restore` is for
    trashed files).

    \b
    Example:  ckpt restore runs/exp1/best.keras --epoch 2
    """
    with obj.catalog() as cat:
        row = cat.restore_version(path, version=version, epoch=epoch)
    if as_json:
        emit_json(checkpoint_json(row))
    else:
        shown = relative_path(row.path, [row.root])
        epoch_text = "-" if row.epoch is None else row.epoch
        echo(f"restored {shown}: now generation {row.generation}, epoch {epoch_text}")
