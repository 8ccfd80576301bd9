"""`ckpt split` and `ckpt compress`: the artifact commands of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import PartialFailure, UsageError
from . import documents
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json, live_work

if TYPE_CHECKING:
    from ..usecases.verifier import Verdict


@click.command()
@click.argument("ref")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Write the artifact here (inside a configured root); default: beside it.",
)
@click.option(
    "--keep-compile",
    is_flag=True,
    help="Keep the compile/training config (a fresh optimizer on load).",
)
@click.option(
    "--layout",
    type=click.Choice(["inference", "json+h5"]),
    default="inference",
    show_default=True,
    help="json+h5: <stem>.json (the stored model config) + <stem>.weights.h5 (load_weights), "
    "for .keras files; <stem>.legacy-weights.h5 for tf-keras legacy .h5 files.",
)
@json_option("The result as JSON.")
@pass_context
def split(
    obj: Context, ref: str, out: str | None, keep_compile: bool, layout: str, as_json: bool
) -> None:
    """Write the slim inference artifact of a checkpoint (architecture + weights, no optimizer
    state); the original stays as the resume artifact.

    Verified (every kept dataset decodes to the source's values) before it is renamed into
    place as `<stem>.inference<ext>`; a torch `.pt`/`.pth` or Lightning `.ckpt` becomes
    `<stem>.inference.safetensors` (its model's state dict, written without torch, each
    tensor's bytes checked); a Hugging Face Trainer `checkpoint-N/` becomes `inference-N/`
    beside it (its files byte for byte, without optimizer, scheduler, RNG and trainer state:
    `from_pretrained` loads it; never named `checkpoint-*`, which the Trainer rotates away),
    and registered in the catalog (`ckpt show` lists it),
    with its model card beside it (`<stem>.inference` + `.md`, see `ckpt describe`). With
    `--layout json+h5`: `<stem>.json` + `<stem>.weights.h5` (of a tf-keras legacy `.h5`:
    `<stem>.legacy-weights.h5`, the save_weights("x.h5") layout) + the card (`<stem>` + `.md`),
    checked in a child process that runs none of the file's code (model_from_json +
    load_weights predict identically to the checkpoint) before they get their names.

    \b
    Example:  ckpt split "$(ckpt best --metric val_loss --run exp1)"
              ckpt split runs/exp1/e07.keras --layout json+h5
    """
    from ..core.units import format_size
    from ..usecases.describe import card_path

    if layout == "json+h5":
        if keep_compile:
            raise click.UsageError("--keep-compile: the json+h5 config is exactly as stored")
        _export(obj, ref, out, as_json)
        return
    with obj.catalog() as cat, _live(cat, "split", as_json) as work:
        checkpoint, result = cat.split(
            ref,
            out=Path(out) if out else None,
            keep_compile=keep_compile,
            on_progress=work.update,
        )
    card = str(card_path(result.path))
    if as_json:
        emit_json({**documents.split(checkpoint, result), "card": card})
        return
    echo(
        f"{obj.shown(result.path)}: {format_size(result.bytes)} "
        f"({result.bytes / max(1, result.source_bytes):.0%} of {obj.shown(checkpoint.path)})"
    )
    echo(f"{obj.shown(card)}: its model card")


def _export(obj: Context, ref: str, out: str | None, as_json: bool) -> None:
    from ..core.units import format_size
    from ..usecases.describe import card_path

    with obj.catalog() as cat:
        checkpoint, result = cat.export(ref, out=Path(out) if out else None)
    card = str(card_path(result.config_path))
    if as_json:
        emit_json(
            {
                "checkpoint": checkpoint.path,
                "id": checkpoint.id,
                "layout": "json+h5",
                "config": str(result.config_path),
                "weights": str(result.weights_path),
                "card": card,
                "config_bytes": result.config_bytes,
                "weights_bytes": result.weights_bytes,
                "source_bytes": result.source_bytes,
                "config_hash": result.config_hash,
                "weights_hash": result.weights_hash,
                "datasets": result.datasets,
            }
        )
        return
    echo(
        f"{obj.shown(result.config_path)}: {format_size(result.config_bytes)} "
        "(the stored model config)"
    )
    echo(
        f"{obj.shown(result.weights_path)}: {format_size(result.weights_bytes)} "
        f"({result.weights_bytes / max(1, result.source_bytes):.0%} of "
        f"{obj.shown(checkpoint.path)})"
    )
    echo(f"{obj.shown(card)}: its model card")


@click.command()
@click.argument("ref")
@click.option(
    "--codec",
    type=click.Choice(["gzip", "lzf", "zstd"]),
    default="gzip",
    show_default=True,
    help="gzip: any reader; lzf: fast, little gain; zstd: readers need hdf5plugin.",
)
@click.option("--level", type=int, help="Codec level (gzip 1-9, zstd 1-22).")
@click.option("--no-shuffle", is_flag=True, help="Without the byte-shuffle filter.")
@json_option("The result as JSON.")
@pass_context
def compress(
    obj: Context, ref: str, codec: str, level: int | None, no_shuffle: bool, as_json: bool
) -> None:
    """Compress a checkpoint in place, losslessly: every dataset is re-encoded, verified equal
    to the original, then the file is atomically replaced (keeping its mtime), unless it would
    not shrink: then it is left as it is, and the service does not try again.

    \b
    Example:  ckpt compress runs/exp1/weights.07-0.23.hdf5 --codec gzip
    """
    from ..core.units import format_size

    with obj.catalog() as cat, _live(cat, "compressed", as_json) as work:
        checkpoint, result = cat.compress(
            ref, codec=codec, level=level, shuffle=not no_shuffle, on_progress=work.update
        )
    if as_json:
        emit_json(documents.compress(checkpoint, result))
        return
    if result.skipped:
        echo(f"{obj.shown(result.path)}: left as it is: {result.skipped} ({result.codec})")
        return
    echo(
        f"{obj.shown(result.path)}: {format_size(result.bytes_before)} -> "
        f"{format_size(result.bytes_after)} ({result.codec})"
    )
    if result.needs:
        echo(f"note: readers of this file need `{result.needs}` before loading it", err=True)


@click.command()
@click.argument("refs", nargs=-1)
@click.option(
    "--load",
    is_flag=True,
    help="Also load each with Keras (tf-keras for Keras 2 files) in a child process "
    "and check its inference artifact predicts identically (needs TensorFlow). The child "
    "loads a private copy in a sandbox (no network, no write outside its temp folder: "
    "load_sandbox) and refuses unloaded a file whose "
    "stored config has a Lambda layer, a custom object or a function reference. Torch-family "
    "files (and a Hugging Face folder's weights) load with torch.load(weights_only=True) or "
    "safetensors in a child (needs torch), their inference .safetensors compared tensor by "
    "tensor.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="Check the remote copies instead (of REFS, or every verified one): each read back "
    "(HEAD) for its size, the service's checksum and our hash in its metadata. One changed "
    "or removed behind our back is marked `changed` or `missing` and never trusted again.",
)
@json_option("JSON array of verdicts.")
@pass_context
def verify(obj: Context, refs: tuple[str, ...], load: bool, remote: bool, as_json: bool) -> None:
    """Re-hash checkpoints (REFS, or every ok one) and their artifacts; compare with the
    catalog. Exit 3 if any differs, is missing, or (with --load) does not load or differs
    (with --remote: if a remote copy changed, is missing, or the store cannot be reached).

    One line per item as it is checked: id, ok or FAILED, its path relative to its root,
    and what was found.

    \b
    Example:  ckpt verify --json | jq '.[] | select(.ok | not)'
    """
    from .output import terminal_width, verify_line

    width = terminal_width()
    if remote:
        if load:
            raise UsageError("verify: --remote and --load do not go together")
        with obj.catalog() as cat:
            verdicts = cat.verify_remote(refs)
        for v in verdicts if not as_json else ():
            echo(verify_line(v.id, v.ok, obj.shown(v.path), v.detail, width))
    else:
        verdicts = _verify_local(obj, refs, load, as_json, width)
    if as_json:
        emit_json(documents.verify(verdicts))
    failed = [v for v in verdicts if not v.ok]
    if failed:
        raise PartialFailure(f"verify: {len(failed)} of {len(verdicts)} failed")


def _verify_local(
    obj: Context, refs: tuple[str, ...], load: bool, as_json: bool, width: int | None
) -> list[Verdict]:
    from .output import verify_line

    with obj.catalog() as cat, _live(cat, "checked", as_json, by_bytes=not load) as work:

        def line(v: Verdict) -> None:  # as soon as it is known: --load takes seconds each
            work.line(verify_line(v.id, v.ok, work.relative(v.path), v.detail, width))

        if as_json:
            verdicts = cat.verify(refs, load=load)
        else:  # by id, as the lines have always come
            ids = refs or tuple(str(c.id) for c in cat.list(status="ok", sort="id"))
            verdicts = cat.verify(ids, load=load, on_verdict=line, on_progress=work.update)
    return verdicts


def _live(cat: Any, verb: str, as_json: bool, *, by_bytes: bool = True) -> Any:
    roots = [str(r.path) for r in cat.config.roots]
    return live_work(verb, as_json=as_json, roots=roots, by_bytes=by_bytes)
