"""The docs site builds with MkDocs, strict: every page of docs/ in the navigation, every link
and anchor resolved, nothing loaded from the network; and a broken link or anchor does fail it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )


def nav_pages(config: dict) -> list[str]:
    found: list[str] = []

    def walk(items: list) -> None:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                walk(value)
            else:
                found.append(value)

    walk(config["nav"])
    return found


def mkdocs_config() -> dict:
    # MkDocs's own tags (`!ENV`) are not used: plain YAML.
    config: dict = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return config


def test_the_site_builds_strict_without_a_warning(tmp_path: Path) -> None:
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    built = sorted(p.name for p in (tmp_path / "site").glob("*.html"))
    pages = sorted(p.with_suffix(".html").name for p in DOCS.glob("*.md"))
    assert set(pages) <= set(built), built
    for html in (tmp_path / "site").rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        remote = re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//[^\"]+", text)
        assert not remote, f"{html.name} loads from the network: {remote}"


def test_the_build_is_strict_about_links_and_anchors() -> None:
    config = mkdocs_config()
    assert config["strict"] is True
    assert config["docs_dir"] == "docs"
    validation = config["validation"]
    for check in ("omitted_files", "absolute_links", "unrecognized_links", "anchors", "not_found"):
        assert validation[check] == "warn", check  # a warning fails a strict build


def test_every_page_is_in_the_navigation() -> None:
    in_nav = nav_pages(mkdocs_config())
    assert len(in_nav) == len(set(in_nav)), in_nav
    assert sorted(in_nav) == sorted(p.name for p in DOCS.glob("*.md"))
    assert not [p for p in DOCS.rglob("*") if p.is_file() and p.parent != DOCS], "subfolders"


@pytest.mark.parametrize(
    ("page", "broken", "said"),
    [
        ("service.md", "[x](retention.md#no-such-heading)", "does not contain an anchor"),
        ("service.md", "[x](no-such-page.md)", "not found among documentation files"),
        ("service.md", "[x](#no-such-heading)", "no such anchor on this page"),
        ("orphan.md", "# A page nobody links\n", 'not included in the "nav"'),
    ],
)
def test_a_broken_link_or_an_orphan_page_fails_the_build(
    tmp_path: Path, page: str, broken: str, said: str
) -> None:
    """The check above can fail: each kind of breakage it must catch is caught."""
    project = tmp_path / "project"
    shutil.copytree(DOCS, project / "docs")
    shutil.copy2(REPO / "mkdocs.yml", project / "mkdocs.yml")
    with (project / "docs" / page).open("a") as out:
        out.write(f"\n{broken}\n")
    done = build(project, tmp_path / "site")
    assert done.returncode != 0, done.stderr
    assert said in done.stderr, done.stderr
