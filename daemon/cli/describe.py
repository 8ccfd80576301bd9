"""`ckpt describe`: a model card for a checkpoint or artifact (`usecases.describe`)."""

from __future__ import annotations

import click

from .context import Context, pass_context


@click.command()
@click.argument("ref")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "json", "txt"]),
    default="md",
    show_default=True,
    help="Markdown (GitHub, model registries), JSON, or plain text.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), metavar="FILE", help="Write it to FILE."
)
@pass_context
def describe(obj: Context, ref: str, fmt: str, output: str | None) -> None:
    """A model card: what the file is (format, Keras version, full or weights-only,
    resumable and why), its inputs, outputs and layers with parameter counts, optimizer and
    training config, epoch and metrics with their sources, sizes, lineage (run, hashes,
    artifacts) and the one line of Python that loads it. REF is a catalog id, a checkpoint's
    path or an artifact's path. From the catalog and the file's metadata only: no weights are
    read, TensorFlow is never imported.

    \b
    Example:  ckpt describe "$(ckpt best --metric val_loss)" -o model-card.txt --format txt
    """
    from ..usecases.describe import render
    from .output import echo

    with obj.catalog() as cat:
        text = render(cat.describe(ref), fmt)
    if output is None:
        click.echo(text, nl=False)  # every name in it went through text.visible
        return
    with click.open_file(output, "w", atomic=True) as out:  # a temp beside it, renamed
        out.write(text)
    echo(f"{output}: the model card of {ref}")
