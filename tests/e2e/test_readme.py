"""The README tells the truth: its test command is CI's, and it documents every command."""

from __future__ import annotations

import re
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


def test_the_install_steps_work_on_an_externally_managed_python() -> None:
    """Debian 12 / Ubuntu 23.04+ refuse `pip install` outside a venv (PEP 668): no documented
    shell step installs with `sudo pip` or `pip --user`, and the service's steps make a venv
    under /opt (or use pipx). Looked for in the README and the docs/ pages it moves into."""
    pages = {p: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]}
    steps = [
        line
        for text in pages.values()
        for block in text.split("```sh\n")[1:]
        for line in block.split("```", 1)[0].splitlines()
    ]
    bad = [
        s
        for s in steps
        if re.search(r"\bpip3? install\b", s)
        and (s.startswith("sudo python3 -m pip") or " --user" in s or s.startswith("sudo pip"))
    ]
    assert bad == []
    assert any(s.startswith("sudo python3 -m venv /opt/ckpt") for s in steps)
    assert any(s.startswith("sudo /opt/ckpt/bin/pip install .") for s in steps)
    assert any(s.startswith("sudo ln -s /opt/ckpt/bin/ckpt /usr/local/bin/ckpt") for s in steps)
    assert any("pipx install ." in text for text in pages.values())
