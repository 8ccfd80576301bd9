"""`Store` is built from parts (`catalog.parts`) a use case can take one by one: every public
method of the Store is in exactly one part, under the same name with the same parameters (their
names, kinds and defaults), so typing a use case against two or three parts loses nothing it
calls and a new Store method must say which part it belongs to. (mypy checks the types:
parts._a_store_is_every_part.)"""

from __future__ import annotations

import inspect

from ckpt_daemon.catalog import parts
from ckpt_daemon.catalog.store import Store

LIFECYCLE = {"close"}  # the Store's own: whoever opened it closes it


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and callable(value) and not inspect.isclass(value)
    }


def _part_methods(part: type) -> set[str]:
    return {name for name in vars(part) if not name.startswith("_") and callable(vars(part)[name])}


def test_every_store_method_is_in_exactly_one_part() -> None:
    owners: dict[str, list[str]] = {}
    for part in parts.PARTS:
        for name in _part_methods(part):
            owners.setdefault(name, []).append(part.__name__)
    shared = {name: names for name, names in owners.items() if len(names) > 1}
    assert not shared, f"methods in several parts: {shared}"
    missing = _public_methods(Store) - set(owners) - LIFECYCLE
    assert not missing, f"Store methods in no part (add them to one in catalog/parts.py): {missing}"
    unknown = set(owners) - _public_methods(Store)
    assert not unknown, f"parts name methods the Store does not have: {unknown}"


def test_each_part_has_the_stores_parameters() -> None:
    for part in parts.PARTS:
        for name in _part_methods(part):
            declared = inspect.signature(vars(part)[name]).parameters
            actual = inspect.signature(getattr(Store, name)).parameters
            assert [(p.name, p.kind, p.default) for p in declared.values()] == [
                (p.name, p.kind, p.default) for p in actual.values()
            ], f"{part.__name__}.{name} differs from Store.{name}"
