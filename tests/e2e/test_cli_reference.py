"""docs/cli.md, the CLI reference, is every command's `--help` as `ckpt` prints it: generated
by `python3 -m ckpt_daemon.cli.reference`, and this test fails while the committed page is stale
(a help text or an option changed without the page being regenerated)."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_daemon.cli import reference
from ckpt_daemon.cli.main import all_commands

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "cli.md"


def stale_diff(committed: str, generated: str) -> str:
    return "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            generated.splitlines(keepends=True),
            "docs/cli.md (committed)",
            "docs/cli.md (from --help)",
            n=1,
        )
    )


def test_the_committed_page_is_what_the_code_generates() -> None:
    diff = stale_diff(PAGE.read_text(encoding="utf-8"), reference.reference())
    assert not diff, f"docs/cli.md is stale: run `{reference.COMMAND}` to update it\n{diff[:3000]}"


def test_the_page_names_every_command_and_option() -> None:
    page = PAGE.read_text(encoding="utf-8")
    titles = reference.names_in(page)
    assert titles == ["ckpt", *(f"ckpt {name}" for name, _ in all_commands())]
    for name, command in all_commands():
        section = page.split(f"## ckpt {name}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("-"):
                    assert option in section, f"ckpt {name}: {option}"


def test_a_changed_help_text_makes_the_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a command whose help changed is caught, with the fix named."""
    from ckpt_daemon.cli.checkpoints import best

    committed = reference.reference()
    monkeypatch.setattr(best, "help", (best.help or "") + "\n\nA sentence added on a branch.")
    diff = stale_diff(committed, reference.reference())
    assert "+  A sentence added on a branch." in diff, diff


@pytest.mark.parametrize("name", ["", "list", "trash restore", "db copy"])
def test_the_generated_help_is_what_ckpt_prints(name: str) -> None:
    """The page's text is what a user's `ckpt ... --help` shows (a terminal of 80+ columns)."""
    done = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", *name.split(), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.stdout.rstrip() == reference.help_of(name).rstrip()


def test_regenerating_is_one_command(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon.cli.reference"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "docs" / "cli.md").read_text(encoding="utf-8") == reference.reference()
