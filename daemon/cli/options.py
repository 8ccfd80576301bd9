"""The options several commands share, declared once: `--json`, every command's switch from the
text for a person to its JSON shape (docs/cli-contract.md; each command says what its JSON
holds in the help text it passes), and `--versions` of the answering commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

Command = TypeVar("Command", bound=Callable[..., object])


def json_option(help: str) -> Callable[[Command], Command]:
    """`--json`, a flag the command receives as `as_json`; `help` says what the JSON holds."""
    return click.option("--json", "as_json", is_flag=True, help=help)


# `best` and `latest`: whether a kept version of a rewritten file may be the answer.
versions_option = click.option(
    "--versions",
    is_flag=True,
    help="Our kept copies of rewritten files (.ckpt-versions) may be the answer too (without "
    "it, only the trainers' own checkpoints are).",
)
