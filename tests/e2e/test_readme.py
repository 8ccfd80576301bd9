"""The README tells the truth: its test command is CI's, and it documents every command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckpt_daemon.cli.main import main_group

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def commands(group: Any, prefix: str = "ckpt ") -> list[str]:
    found = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            found += commands(cmd, f"{prefix}{name} ")
        else:
            found.append(prefix + name)
    return found


def test_first_lines_are_the_install_and_test_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2
    assert "ckpt" in block[0] and "install" in block[0]
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci_lines[-1] == block[1]


def test_every_command_is_documented() -> None:
    listed = commands(main_group)
    assert len(listed) >= 8
    for command in listed:
        assert f"`{command}" in README, command
