"""docs/cli-contract.md sends the reader to each command's generated reference (docs/cli.md,
one heading per command): every link into it lands on a heading the page has, and every
command has its link, so neither a renamed command nor a regenerated page leaves a dead one."""

from __future__ import annotations

from pathlib import Path

from ckpt_daemon.cli.main import all_commands
from tests.support.doc_links import heading_anchors, links

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONTRACT = (DOCS / "cli-contract.md").read_text()
REFERENCE = (DOCS / "cli.md").read_text()


def into_the_reference() -> dict[str, str]:
    """{anchor: link} of the contract's links into docs/cli.md."""
    return {link.partition("#")[2]: link for link in links(CONTRACT) if link.startswith("cli.md#")}


def test_every_link_into_the_reference_lands_on_a_heading() -> None:
    anchors = heading_anchors(REFERENCE)
    assert "ckpt-trash-restore" in anchors  # the slug of `## ckpt trash restore`
    dead = [link for anchor, link in into_the_reference().items() if anchor not in anchors]
    assert not dead, f"no such heading in docs/cli.md: {dead}"


def test_every_command_is_linked_to_its_reference() -> None:
    linked = set(into_the_reference())
    commands = [name for name, command in all_commands() if not hasattr(command, "commands")]
    missing = [n for n in commands if "ckpt-" + n.replace(" ", "-") not in linked]
    assert len(commands) >= 30 and not missing, f"commands without a link: {missing}"


def test_a_dead_anchor_is_caught() -> None:
    assert "ckpt-no-such" not in heading_anchors(REFERENCE)
    assert heading_anchors("## ckpt db copy\n```text\n## not a heading\n```\n") == {"ckpt-db-copy"}
