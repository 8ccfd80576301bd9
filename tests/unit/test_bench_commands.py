"""The bench commands the pages show stay runnable: every `bench/NAME.py` they name exists, and
every `bench/index_cost.py` line (the one index-cost bench, its families chosen by `--family`)
parses with the script's own options, the concrete lines whole, the synopses option by option.
(`python3 ...` lines are not run by test_documented_commands: a bench takes minutes.)"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPT = re.compile(r"bench/([A-Za-z_]\w*)\.py")
# `bench/index_cost.py` and what follows it on its line, up to a closing backtick or a comment.
INDEX_COST = re.compile(r"bench/index_cost\.py([^`#\n]*)")


def index_cost() -> ModuleType:
    sys.path.insert(0, str(REPO / "bench"))  # it imports its neighbour `_common`
    try:
        spec = importlib.util.spec_from_file_location(
            "index_cost", REPO / "bench" / "index_cost.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "bench"))


def shown() -> list[tuple[str, str]]:
    """(page, the arguments after `bench/index_cost.py`) of every line that runs it."""
    found = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            found += [(page.name, args.strip()) for args in INDEX_COST.findall(line)]
    return found


def test_every_bench_script_the_pages_name_exists() -> None:
    named = {(p.name, m) for p in PAGES for m in SCRIPT.findall(p.read_text())}
    missing = [
        f"{page}: bench/{name}.py"
        for page, name in named
        if not (REPO / "bench" / f"{name}.py").is_file()
    ]
    assert not missing, missing


def test_the_shown_index_cost_lines_parse_with_its_options() -> None:
    module = index_cost()
    parser = module.parser()
    options = {option for action in parser._actions for option in action.option_strings}
    lines = shown()
    assert {"orbax", "torch"} <= {word for _page, args in lines for word in args.split()}, lines
    for page, args in lines:
        if "[" in args:  # a synopsis: each option it names is one the script takes
            named = set(re.findall(r"--[\w-]+", args))
            assert named <= options, (page, args, named - options)
            continue
        parsed = parser.parse_args(shlex.split(args))
        assert module.families(parsed), (page, args)


def test_a_family_the_script_lacks_is_refused() -> None:
    parser = index_cost().parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--family", "tensorflow"])
    assert index_cost().families(parser.parse_args(["--family", "all"])) == [
        "keras",
        "torch",
        "orbax",
    ]
