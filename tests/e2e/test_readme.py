"""The README tells the truth: its test command is CI's, and it documents every command."""

from __future__ import annotations

from pathlib import Path

from ckpt_daemon.cli.main import all_commands

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_first_lines_are_the_install_and_test_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2
    assert "ckpt" in block[0] and "install" in block[0]
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci_lines[-1] == block[1]


def test_every_command_is_documented() -> None:
    listed = [f"ckpt {name}" for name, cmd in all_commands() if not hasattr(cmd, "commands")]
    assert len(listed) >= 8
    for command in listed:
        assert f"`{command}" in README, command
