"""Who may hold the whole catalog: the `Store` is a set of facets (`store.reads`, `store.acts`,
`store.leases`, ...), and a use case takes the facets it uses (or `catalog.store.Acting` when it
acts through the rail). Only the orchestrators take a `Store` parameter: the service and the
Python API (which open the catalog and hand its facets down) and the indexer (which hands the
Store to its per-root scan). Checked on the source, as test_architecture checks the layers."""

from __future__ import annotations

import ast
import inspect
from functools import cache
from pathlib import Path

from ckpt_daemon.catalog import db
from ckpt_daemon.catalog.store import Acting, Store
from tests.unit.test_architecture import modules

# Modules (or layers, ending in ".") whose functions may take a `Store` parameter.
MAY_TAKE_A_STORE = ("api.", "service.", "usecases.indexer")
FACETS = (
    "reads",
    "index",
    "claims",
    "acts",
    "recovery",
    "leases",
    "runs",
    "versions",
    "usage",
    "daemons",
    "remote",
    "stage_jobs",
)


def _names_store(annotation: ast.expr | None) -> bool:
    """Whether a parameter's annotation names `Store` (`Store`, `Store | None`, `store.Store`,
    or any of them as a string)."""
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                if _names_store(ast.parse(node.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
        if (isinstance(node, ast.Name) and node.id == "Store") or (
            isinstance(node, ast.Attribute) and node.attr == "Store"
        ):
            return True
    return False


def store_parameters(tree: ast.Module) -> list[str]:
    """`function(parameter)` of every parameter annotated with `Store` in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            for arg in every:
                if arg is not None and _names_store(arg.annotation):
                    found.append(f"{getattr(node, 'name', 'lambda')}({arg.arg}) line {node.lineno}")
    return found


@cache
def taking() -> dict[str, list[str]]:
    """{module: its Store parameters} of every module with one."""
    found = {name: store_parameters(tree) for name, tree in modules().items()}
    return {name: where for name, where in found.items() if where}


def _may_take_a_store(module: str) -> bool:
    return any(
        module.startswith(entry) if entry.endswith(".") else module == entry
        for entry in MAY_TAKE_A_STORE
    )


def test_only_the_orchestrators_take_a_store() -> None:
    offenders = [
        f"{name}: {where}"
        for name, found in taking().items()
        if not _may_take_a_store(name)
        for where in found
    ]
    assert not offenders, (
        "take the facets the function uses (`reads: Reads`, `acts: Acts`; `store: Acting` to act "
        "through the rail), not the whole Store: " + "; ".join(offenders)
    )


def test_the_allow_list_names_only_modules_that_take_a_store() -> None:
    """Kept short and true: an entry no module needs any more goes."""
    for entry in MAY_TAKE_A_STORE:
        assert any(
            name.startswith(entry) if entry.endswith(".") else name == entry for name in taking()
        ), f"{entry} takes no Store: drop it from MAY_TAKE_A_STORE"


def test_the_check_sees_a_store_parameter_however_it_is_written() -> None:
    source = """
def a(store: Store) -> None: ...
def b(x: int, *, store: Store | None = None) -> None: ...
def c(store: "Store") -> None: ...
def d(store: catalog.store.Store) -> None: ...
def e(reads: Reads, objects: ObjectStore, stores: list[str]) -> Store: ...
"""
    found = store_parameters(ast.parse(source))
    assert [f.split(" line")[0] for f in found] == ["a(store)", "b(store)", "c(store)", "d(store)"]


def test_the_store_is_its_facets_and_nothing_else(tmp_path: Path) -> None:
    """No pass-through reads or writes on the Store: every public method is a facet's."""
    public = {name for name in vars(Store) if not name.startswith("_")}
    assert public == {"close"}, f"the Store's own methods (put them on a facet): {public}"
    store = Store(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        for name in FACETS:
            facet = getattr(store, name)
            assert isinstance(facet, db.Facet), name
        # `Acting` (what the rail needs) is a subset of the Store's facets.
        members = {n for n, _ in inspect.getmembers(Acting) if not n.startswith("_")}
        assert members and members <= set(FACETS), members
    finally:
        store.close()
