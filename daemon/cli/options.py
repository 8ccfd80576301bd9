"""The options many commands share, declared once: `--json`, every command's switch from the
text for a person to its JSON shape (docs/cli-contract.md). Each command says what its JSON
holds in the help text it passes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

Command = TypeVar("Command", bound=Callable[..., object])


def json_option(help: str) -> Callable[[Command], Command]:
    """`--json`, a flag the command receives as `as_json`; `help` says what the JSON holds."""
    return click.option("--json", "as_json", is_flag=True, help=help)
