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
    # The pages that show the test command show CI's, and it installs the system packages too.
    assert block[1].startswith(".ci/system-packages && "), block[1]
    for page in ("development.md", "getting-started.md"):
        assert f"\n{block[1]}\n" in (REPO / "docs" / page).read_text(), page


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


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
MAX_IMAGE_BYTES = 200_000


def test_every_readme_image_is_a_small_committed_png() -> None:
    """The tour's screenshot: in docs/ (MkDocs shows it too), a real PNG, small."""
    images = IMAGE.findall(README)
    assert images, "the README's tour shows a screenshot"
    for image in images:
        data = (REPO / image).read_bytes()
        assert image.startswith("docs/") and data.startswith(b"\x89PNG\r\n\x1a\n"), image
        assert len(data) <= MAX_IMAGE_BYTES, f"{image}: {len(data)} bytes"


def test_every_readme_link_lands_on_a_docs_page_and_heading() -> None:
    links = re.findall(r"\]\(([^)]+)\)", IMAGE.sub("", README))
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
