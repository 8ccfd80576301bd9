"""docs/architecture.md stays the map of the code (its module map generated from the docstrings),
and no comment points outside the repository.

The module map must name every module of the package (and nothing that does not exist), the
layer table every layer folder, and the import matrix must be the one the architecture test
enforces. Comments and docstrings may cite files of the repository only: a pointer to a file
that lives elsewhere (a design note beside the checkout, an absolute path of one machine)
leaves the reader with nothing."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "daemon"
MIGRATIONS = REPO / "migrations"
SOURCE_FOLDERS = ("daemon", "tests", "bench", "migrations")
MODULE_PATH = re.compile(r"`((?:daemon|migrations)/[\w/]+\.py)`")


def documented() -> set[str]:
    return set(MODULE_PATH.findall(DOC.read_text()))


def modules() -> set[str]:
    """Every module file of the package and its migrations; a subpackage's `__init__.py` only
    marks a folder (the layer table describes the folder)."""
    found = set()
    for folder in (PACKAGE, MIGRATIONS):
        for path in folder.rglob("*.py"):
            relative = path.relative_to(REPO)
            if path.name == "__init__.py" and path.parent not in (PACKAGE,):
                continue
            found.add(relative.as_posix())
    return found


def test_every_module_is_in_the_module_map() -> None:
    missing = sorted(modules() - documented())
    assert not missing, f"add a row to docs/architecture.md's module map for: {missing}"


def test_the_doc_names_only_modules_that_exist() -> None:
    gone = sorted(m for m in documented() if not (REPO / m).is_file())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_every_layer_folder_is_in_the_layer_table() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    text = DOC.read_text()
    assert folders, "no layer folders found"
    for folder in folders:
        assert f"`daemon/{folder}/`" in text, f"layer folder daemon/{folder}/ is not described"


def _enforced_matrix() -> dict[str, set[str]]:
    """MAY_IMPORT as tests/test_architecture.py defines it (wherever that file lives)."""
    source = next(REPO.joinpath("tests").rglob("test_architecture.py")).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "MAY_IMPORT":
            assert node.value is not None
            matrix: dict[str, set[str]] = ast.literal_eval(node.value)
            return matrix
    raise AssertionError("MAY_IMPORT not found in test_architecture.py")


def _documented_matrix() -> dict[str, set[str]]:
    text = DOC.read_text()
    table = text[text.index("| layer | may import |") :].split("\n\n")[0]
    matrix = {}
    for line in table.splitlines()[2:]:
        layer, allowed = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        names = {name.strip().strip("`") for name in allowed.split(",")}
        matrix[layer] = set() if allowed == "(nothing)" else names
    return matrix


def test_the_documented_import_matrix_is_the_enforced_one() -> None:
    assert _documented_matrix() == _enforced_matrix()


# What a pointer outside the repository looks like: the design notes that lived beside the
# checkout, a path up and out of it, an absolute path of one machine.
OUTSIDE = re.compile(
    r"ARCHITECTURE\.md|keras-formats\.md|ops-facts\.md|shared/design|\.\./shared|"
    r"(?<![\w.])/work/|(?<![\w.])/home/\w+"
)
# Repository files a comment may name by their file name alone.
MARKDOWN = re.compile(r"[\w./-]+\.md\b")


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((body[0].lineno, value.value))
    return found


@cache
def _markdown_files() -> set[str]:
    return {
        p.relative_to(REPO).as_posix()
        for p in REPO.rglob("*.md")
        if not {".git", "out", "node_modules"} & set(p.relative_to(REPO).parts)
    }


def _markdown_in_repo(name: str) -> bool:
    """`name` is a Markdown file of the repository, by its path or the end of its path."""
    return any(f == name or f.endswith("/" + name) for f in _markdown_files())


def pointers_outside() -> list[str]:
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            for line, text in _comments_and_docstrings(path):
                where = f"{path.relative_to(REPO)}:{line}"
                found += [f"{where}: {m}" for m in OUTSIDE.findall(text)]
                found += [
                    f"{where}: {m}" for m in MARKDOWN.findall(text) if not _markdown_in_repo(m)
                ]
    return found


def test_no_comment_or_docstring_points_outside_the_repository() -> None:
    assert pointers_outside() == []


def test_the_pointer_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check above can fail: each kind of pointer it must catch is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Layouts: shared/design/keras-formats.md §1."""\n'
        "# see ARCHITECTURE.md\n"
        "def f() -> None:\n"
        '    """Facts from /work/notes/x.txt and ../shared/y."""\n'
        "x = 1  # docs/architecture.md and README.md are ours\n"
    )
    texts = [text for _line, text in _comments_and_docstrings(sample)]
    hits = sorted(m for text in texts for m in OUTSIDE.findall(text))
    assert hits == ["../shared", "/work/", "ARCHITECTURE.md", "keras-formats.md", "shared/design"]
    named = sorted(m for text in texts for m in MARKDOWN.findall(text))
    assert [m for m in named if not _markdown_in_repo(m)] == [
        "ARCHITECTURE.md",
        "shared/design/keras-formats.md",
    ]


def test_the_module_map_is_generated_from_the_docstrings() -> None:
    """The map is the modules' own first docstring paragraphs (tests/support/module_map.py):
    a module whose docstring changed, or a new one, fails here until the map is rewritten."""
    from tests.support import module_map

    page = DOC.read_text()
    assert module_map.rendered(page) == page, (
        "docs/architecture.md's module map is stale: run `python3 -m tests.support.module_map`"
    )
