"""`ckpt tier` and `ckpt fetch`: the object-storage tier by hand."""

from __future__ import annotations

import click

from ..core.errors import PartialFailure
from .context import Context, pass_context
from .output import echo, emit_json


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="REF...")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as JSON.")
@pass_context
def tier(obj: Context, refs: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Move checkpoints to their root's object store (`remote:` in the config), then free
    the local disk.

    Each one is uploaded (multipart; an upload a killed command left is resumed), verified by
    reading the copy back (its size, the SHA-256 checksum the service computed, our BLAKE3 in
    its metadata) and recorded; only then is the local copy re-checked and moved to the trash
    (`ckpt trash restore` brings it back, `ckpt fetch` too, after the purge). A checkpoint of
    several files (a TF checkpoint, a SavedModel, HF, Orbax or DCP folder) goes as one tar
    object (`<name>.tar`), generated as it is sent. Pinned and not-ok checkpoints are skipped,
    with the reason. Credentials come from the standard AWS chain. Exit 3 if some failed
    (their local copies untouched).

    \b
    Example:  ckpt tier exp1/e03.keras exp1/e04.keras --dry-run
    """
    with obj.catalog() as cat:
        report = cat.tier(list(refs), dry_run=dry_run)
    if as_json:
        emit_json(report.as_dict())
    else:
        verb = "would tier" if dry_run else "tiered"
        for item in report.items:
            if item.action == "skip":
                echo(f"skipped {obj.shown(item.path)}: {'; '.join(item.reasons)}")
            elif item.kept_existing:
                echo(
                    f"{verb} {obj.shown(item.path)} -> {item.remote_url} (an identical object "
                    "was already there: kept as it was, not overwritten, verified)"
                )
            elif item.done is not False:
                echo(f"{verb} {obj.shown(item.path)} -> {item.remote_url}")
        for failure in report.failures:
            echo(f"failed {obj.shown(failure['path'])}: {failure['error']}", err=True)
    if report.failures:
        raise PartialFailure(f"tier: {len(report.failures)} of {len(report.items)} failed")


@click.command()
@click.argument("ref")
@click.option(
    "--to",
    "to",
    metavar="PATH",
    help="Write it here (a new file, or into this folder) instead of at its own path.",
)
@pass_context
def fetch(obj: Context, ref: str, to: str | None) -> None:
    """Bring a tiered checkpoint back from its object store; prints the local path.

    To its own path: from the local trash if it is still there, else streamed from the store,
    checked against the catalog's hash and renamed into place (never over an existing file);
    its row is `ok` again. A tar object (a checkpoint of several files) is unpacked safely
    (regular files and folders under their recorded names only) into a temp folder, checked
    against the catalog's hash and renamed into place. With --to, a new file elsewhere (for
    several files: into an existing folder); the catalog is unchanged. Exit 6 if it has no
    verified remote copy.

    \b
    Example:  python resume.py --from "$(ckpt fetch exp1/e03.keras)"
    """
    with obj.catalog() as cat:
        path = cat.fetch(ref, to=to)
    echo(str(path))


@click.command(name="remote")
@click.argument("refs", nargs=-1, required=True, metavar="REF...")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as JSON.")
@pass_context
def trash_remote(obj: Context, refs: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Give up checkpoints' remote copies: each moved under its store's trash prefix.

    A server-side copy under `<prefix>/.ckpt-trash/<batch>/`, read back, recorded, and only
    then the original key deleted; `ckpt trash list` shows it, `ckpt trash restore REF` puts
    it back at its key, `ckpt trash purge` deletes it after trash.purge_after. The copy of a
    pinned checkpoint, or of its run's newest, best (by any metric) or last resumable one, is
    kept, with the reason. Exit 3 if some failed (their copies untouched).

    \b
    Example:  ckpt trash remote exp1/e03.keras --dry-run
    """
    with obj.catalog() as cat:
        report = cat.trash_remote(list(refs), dry_run=dry_run)
    if as_json:
        emit_json(report.as_dict())
    else:
        verb = "would trash" if dry_run else "trashed"
        for item in report.items:
            if item["action"] == "keep":
                echo(f"kept {obj.shown(item['path'])}'s remote copy: {item['reason']}")
            elif item.get("done") is not False:
                moved = f" -> {item['trash_url']}" if item.get("trash_url") else ""
                echo(f"{verb} remote copy {item['remote_url']}{moved}")
        for failure in report.failures:
            echo(f"failed {obj.shown(failure['path'])}: {failure['error']}", err=True)
    if report.failures:
        raise PartialFailure(f"trash remote: {len(report.failures)} of {len(report.items)} failed")
