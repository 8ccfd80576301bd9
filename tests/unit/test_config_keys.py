"""Every config key the validation accepts is in the shipped config.yaml (under its parents) and
docs/configuration.md's key table, and the table names no key the validation refuses.

The keys are found by asking the real validation (`settings.config.parse`): each section is
given an unknown key, and its refusal names the keys it allows; each allowed key is then tried
as a section itself (a mapping, or a list of mappings). A key added on any branch is found
without this test knowing it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.settings import config

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
PROBE = "zz_not_a_key"
Step = str | int  # a key, or 0: the first item of a list


# What a list item needs besides the probe to reach the check of its keys' values.
ITEM_REQUIRES: dict[str, dict[str, Any]] = {
    "roots": {"path": "/srv/runs"},
    "runs": {"match": "sweeps/*"},
    "hooks": {"on": ["corrupt"], "command": ["/bin/true"]},
    "pipeline": {"name": "eval", "uses": "verify"},
}


def base() -> dict[str, Any]:
    return {"state_dir": "/srv/state", "roots": [{"path": "/srv/runs"}]}


def placed(steps: tuple[Step, ...], value: dict[str, Any]) -> dict[str, Any]:
    """A valid config with `value` at `steps` (merged into what is there)."""
    document = base()
    if not steps:
        return {**document, **value}
    node: Any = document
    for i, step in enumerate(steps[:-1]):
        empty: Any = [] if isinstance(steps[i + 1], int) else {}
        if isinstance(step, int):
            if not node:
                node.append({**ITEM_REQUIRES.get(str(steps[i - 1]), {})})
            node = node[0]
        elif not isinstance(node.get(step), type(empty)):
            node[step] = empty
            node = node[step]
        else:
            node = node[step]
    last = steps[-1]
    if isinstance(last, int):
        if node and isinstance(node[0], dict):
            node[0].update(value)
        else:
            node[:] = [{**ITEM_REQUIRES.get(str(steps[-2]), {}), **value}]
    elif isinstance(node.get(last), dict):
        node[last].update(value)
    else:
        node[last] = value
    return document


def dotted(steps: tuple[Step, ...]) -> str:
    return "".join("[]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")


def allowed_keys(steps: tuple[Step, ...]) -> set[str] | None:
    """The keys the section at `steps` allows, as its refusal of an unknown key names them;
    None when the value there is not such a section."""
    text = yaml.safe_dump(placed(steps, {PROBE: 1}))
    try:
        config.parse(text, base=Path("/srv"), source="test")
    except ConfigError as exc:
        where = re.sub(r"\[\d+\]", "[]", exc.key)
        expected = f"{dotted(steps)}.{PROBE}".lstrip(".")
        if where.replace("[]", "") == expected.replace("[]", "") and exc.reason.startswith(
            "unknown key (allowed: "
        ):
            return set(exc.reason.removeprefix("unknown key (allowed: ").rstrip(")").split(", "))
        return None
    where = dotted(steps) or "(top level)"
    raise AssertionError(
        f"{where}: a mapping with an unknown key was accepted (its value unchecked?)"
    )


def accepted_keys() -> dict[str, str | None]:
    """{dotted key: the key whose section it repeats, or None}: every key the validation
    accepts. A section that allows the same keys as one found before under the same name (a
    root's `retention`, a run rule's) is listed, not walked again."""
    found: dict[str, str | None] = {}
    sections: dict[tuple[str, frozenset[str]], str] = {}

    def walk(steps: tuple[Step, ...]) -> None:
        keys = allowed_keys(steps)
        assert keys, dotted(steps) or "(top level)"
        for key in sorted(keys):
            here = (*steps, key)
            found[dotted(here)] = None
            for candidate in (here, (*here, 0)):
                inner = allowed_keys(candidate)
                if inner is not None:
                    seen = sections.setdefault((key, frozenset(inner)), dotted(here))
                    if seen == dotted(here):
                        walk(candidate)
                    else:
                        found[dotted(here)] = seen
                    break

    walk(())
    return found


@pytest.fixture(scope="module")
def keys() -> dict[str, str | None]:
    return accepted_keys()


def documented_keys() -> dict[str, str]:
    """{key: its row} of the page's key table (`| key | default | what |`)."""
    text = PAGE.read_text()
    table = text[text.index("| key | default | what |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cell = line.strip("|").split(" | ")[0].strip()
        assert re.fullmatch(r"`[\w.\[\]]+`", cell), line
        rows[cell.strip("`")] = line
    return rows


def test_the_probe_finds_the_sections_and_their_keys(keys: dict[str, str | None]) -> None:
    """The walk can fail: it finds what is known to be there, nested and repeated."""
    for key in ("database", "roots[].path", "retention.keep_best.metric", "hooks[].on"):
        assert key in keys, sorted(keys)
    assert keys["roots[].retention"] == "retention"
    assert keys["runs[].retention"] == "retention"
    assert "schedule.rescan" in keys and "service.lease_ttl" in keys
    assert len(keys) >= 50, len(keys)


def test_every_key_is_in_the_key_table_and_no_other(keys: dict[str, str | None]) -> None:
    rows = documented_keys()
    missing = sorted(set(keys) - set(rows))
    assert not missing, f"add rows to docs/configuration.md's key table for: {missing}"
    unknown = sorted(set(rows) - set(keys))
    assert not unknown, f"docs/configuration.md documents keys the validation refuses: {unknown}"
    for key, repeats in keys.items():
        if repeats is not None:
            assert f"same keys as `{repeats}`" in rows[key], rows[key]


# A key's line in config.yaml, set or commented out: `key:`, `# key:`, `  - key:`, `#   - key:`.
KEY_LINE = re.compile(r"^(?P<lead> *)(?:#(?P<gap> *))?(?P<dash>- )?(?P<key>\w+):(?:\s|$)")


def shipped_keys() -> set[str]:
    """Every key path config.yaml names, set or commented out (`roots.name`, list items without
    their `[]`): a key's parents are the keys above it at a smaller indentation (a commented
    line counts from the column after `# `, as if uncommented; a list item's keys from after
    its `- `)."""
    stack: list[tuple[int, str]] = []
    found = set()
    for line in (REPO / "config.yaml").read_text().splitlines():
        m = KEY_LINE.match(line)
        if not m:
            continue
        gap = len(m["gap"]) - 1 if m["gap"] is not None else 0
        indent = len(m["lead"]) + gap + (2 if m["dash"] else 0)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m["key"]))
        found.add(".".join(key for _, key in stack))
    return found


def test_shipped_keys_are_read_with_their_nesting() -> None:
    """The reading of config.yaml can fail: set and commented-out keys, in lists and nested."""
    found = shipped_keys()
    assert {"completion.settle_seconds", "roots.path", "roots.name", "hooks.on"} <= found
    assert {"retention.keep_best.metric", "runs.match", "service.node"} <= found
    assert "roots.settle_seconds" not in found and "keep_best.metric" not in found


def test_every_key_is_in_the_shipped_config(keys: dict[str, str | None]) -> None:
    """Set or commented out, every key the validation accepts is in config.yaml, under its
    parents (`retention.keep_best.mode` under `keep_best:`, under `retention:`)."""
    shipped = shipped_keys()
    missing = sorted(key for key in keys if key.replace("[]", "") not in shipped)
    assert not missing, f"config.yaml does not name, under its parents: {missing}"
