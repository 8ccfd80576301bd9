"""The README tells the truth: its test command is CI's, it is a lobby (at most 10 kB) whose
links land on docs pages, and the CLI contract page documents every command."""

from __future__ import annotations

import re
from pathlib import Path

from ckpt_daemon.cli.main import all_commands

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CONTRACT = (REPO / "docs" / "cli-contract.md").read_text()
README_MAX_BYTES = 10_000


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
        assert f"`{command}" in CONTRACT, command


def test_the_readme_is_a_lobby() -> None:
    size = len(README.encode())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move the detail into docs/"


def heading_anchors(page: str) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc slugify), outside code."""
    text = re.sub(r"^(`{3,}).*?^\1", "", page, flags=re.M | re.S)
    slugs = set()
    for title in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", slug))
    return slugs


def test_every_readme_link_lands_on_a_docs_page_and_heading() -> None:
    links = re.findall(r"\]\(([^)]+)\)", README)
    assert len(links) >= 15, links
    pages = set()
    for link in links:
        path, _, anchor = link.partition("#")
        assert path.startswith("docs/") and path.endswith(".md"), link
        target = REPO / path
        assert target.is_file(), link
        pages.add(path)
        if anchor:
            assert anchor in heading_anchors(target.read_text()), link
    in_docs = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    assert pages == in_docs, f"pages the README does not link: {sorted(in_docs - pages)}"
