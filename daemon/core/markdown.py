"""Values inside GitHub-flavoured Markdown, escaped so that no name breaks out of its table
cell or line (the model card's Markdown layout). Pure: strings in, Markdown out."""

from __future__ import annotations

import re

from .text import visible

# What CommonMark/GFM reads as markup anywhere in a line. `_` is not here: it is markup only
# where it can open or close emphasis, never between two letters or digits (`hidden_a`).
_MD_MARKUP = ("\\", "|", "`", "*", "<", ">", "[", "]", "~", "&")
_LINE_START = re.compile(r"^(?:[#+=-]|\d+(?=[.)]))")  # a heading, list item or rule if first


def escaped(text: str) -> str:
    """A value inside a Markdown table cell or line: no pipe, backtick or markup breaks out;
    an identifier's intraword underscores stay as written, so the card greps (`hidden_a`)."""
    out = visible(text)
    for char in _MD_MARKUP:
        out = out.replace(char, "\\" + char)
    return "".join(
        "\\_"
        if c == "_" and not (0 < i < len(out) - 1 and out[i - 1].isalnum() and out[i + 1].isalnum())
        else c
        for i, c in enumerate(out)
    )


def escaped_line(text: str) -> str:
    """`escaped` for text that starts a line (a list item): no heading, list or rule either."""
    out = escaped(text)
    found = _LINE_START.match(out)
    if found is None:
        return out
    if found[0][0].isdigit():
        at = found.end()
        return out[:at] + "\\" + out[at:]
    return "\\" + out


def code_span(text: str) -> str:
    """An identifier (a layer, metric or config key) as a code span, exactly as it is named:
    fenced by more backticks than it holds, its pipes escaped for the table. A name with a
    backslash before a pipe cannot be both in a table cell: it is escaped as text instead."""
    out = visible(text)
    if not out or "\\|" in out:
        return escaped(text)
    fence = "`" * (1 + max((len(r) for r in re.findall("`+", out)), default=0))
    pad = " " if out[0] == "`" or out[-1] == "`" or (out[0] == " " and out[-1] == " ") else ""
    return f"{fence}{pad}{out.replace('|', chr(92) + '|')}{pad}{fence}"


def table(
    header: list[str],
    rows: list[list[str]],
    right: frozenset[int] = frozenset(),
    code: frozenset[int] = frozenset(),
) -> list[str]:
    """A GFM table; the columns in `code` hold identifiers, shown as code spans."""
    cells = [[code_span(c) if i in code else escaped(c) for i, c in enumerate(row)] for row in rows]
    return cells_table(header, cells, right)


def cells_table(header: list[str], cells: list[list[str]], right: frozenset[int]) -> list[str]:
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    return [*lines, *("| " + " | ".join(row) + " |" for row in cells), ""]
