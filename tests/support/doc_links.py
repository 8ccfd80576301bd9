"""The links of our Markdown pages and the heading ids they may land on, as MkDocs makes them
(Python-Markdown's toc slugify), for the tests that keep links from drifting."""

from __future__ import annotations

import re

LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(page: str) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc slugify), outside code."""
    text = re.sub(r"^(`{3,}).*?^\1", "", page, flags=re.M | re.S)
    slugs = set()
    for title in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", slug))
    return slugs


def links(page: str) -> list[str]:
    """Every Markdown link target of `page` (`path#anchor`, `#anchor`, a URL)."""
    return LINK.findall(page)
