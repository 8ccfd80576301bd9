"""The docs pages name what the code has: every public method of the Python API's `Catalog`,
with its parameters, is in docs/python-api.md's method table."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from ckpt_daemon.api import Catalog, open_catalog

REPO = Path(__file__).resolve().parents[2]


def method_rows() -> dict[str, str]:
    text = (REPO / "docs" / "python-api.md").read_text()
    table = text[text.index("| method | returns | command |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        signature = line.strip("|").split(" | ")[0].strip().strip("`")
        rows[signature.split("(", 1)[0]] = signature
    return rows


def public_methods() -> dict[str, inspect.Signature]:
    """`Catalog`'s own methods and those of the halves it is made of (`api.reads`, `api.acts`)."""
    return {
        name: inspect.signature(member)
        for cls in Catalog.__mro__
        if cls is not object
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member)
    }


def parameters(signature: inspect.Signature) -> list[str]:
    return [name for name in signature.parameters if name != "self"]


def named(arguments: str) -> list[str]:
    """The parameter names of a documented `f(a, b=1, *, c=None)`."""
    parts = (part.split("=", 1)[0].strip() for part in arguments.split(","))
    return [part for part in parts if part and part != "*"]


def test_every_public_catalog_method_is_in_the_table_with_its_parameters() -> None:
    rows = method_rows()
    methods = public_methods()
    assert len(methods) >= 20, sorted(methods)
    assert sorted(rows) == sorted(methods), "docs/python-api.md's method table and Catalog differ"
    for name, signature in methods.items():
        documented = named(rows[name].split("(", 1)[1].rsplit(")", 1)[0])
        assert documented == parameters(signature), f"{name}: {rows[name]} vs {signature}"


def test_open_catalog_is_documented_with_its_parameters() -> None:
    text = (REPO / "docs" / "python-api.md").read_text()
    documented = re.search(r"`open_catalog\(([^`]*)\)`", text)
    assert documented is not None
    assert named(documented.group(1)) == list(inspect.signature(open_catalog).parameters)
