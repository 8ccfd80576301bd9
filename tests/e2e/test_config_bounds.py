"""Issue 20 item 12: every numeric config key has bounds, checked on one path
(`settings.bounds`): `ckpt config check` accepts each key at its bounds and refuses it, exit 2
with the key named, just outside them, at a 20-digit number and at 1e-9 where that is below
its lowest value. `min_free: 1e-9%` and a 20-digit `versions.keep_previous` (accepted before)
are refused. tests/unit/test_config.py checks that every numeric field of the parsed config is
one of these keys.

The files are checked by `ckpt config check` (the CLI's own entry point, `cli.main.run`) in one
child process, so that some 200 files do not start 200 interpreters.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from ckpt_daemon.settings.bounds import MAX_SIZE, NUMERIC_KEYS, Bound

DRIVER = """
import contextlib, io, json, sys
from ckpt_daemon.cli.main import run
out = []
for path in sys.argv[1:]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run(["config", "check", path])
    out.append([path, code, err.getvalue()])
print(json.dumps(out))
"""
TWENTY_DIGITS = 10**19 + 7


def document(root: Path, pattern: str, value: Any) -> dict[str, Any]:
    """The smallest config that sets the key of `pattern` to `value`."""
    doc: dict[str, Any] = {"roots": [{"path": str(root)}]}
    head, _, leaf = pattern.rpartition(".")
    if pattern.startswith("roots[]."):
        doc["roots"][0][pattern.split(".", 1)[1]] = value
    elif pattern == "retention.keep_best[].n":
        doc["retention"] = {"keep_best": [{"metric": "val_loss", "n": value}]}
    elif pattern == "hooks[].timeout":
        doc["hooks"] = [{"on": ["corrupt"], "command": ["/bin/true"], "timeout": value}]
    elif pattern in ("pipeline[].on.every", "pipeline[].on.final"):
        doc["pipeline"] = [{"name": "eval", "uses": "verify", "on": {leaf: value}}]
    elif pattern.startswith("pipeline[]."):
        doc["pipeline"] = [{"name": "eval", "uses": "verify", leaf: value}]
    elif pattern in ("service.metrics_listen", "service.web_listen"):
        doc["service"] = {leaf: f"127.0.0.1:{value}"}
    elif pattern == "retention.tier_after" or head == "retention.keep_local":
        # Tiering needs a remote to tier to, and keep_local.best a keep_best rule to keep.
        retention: dict[str, Any] = {"keep_last": 3, "keep_best": [{"metric": "val_loss"}]}
        if leaf == "tier_after":
            retention[leaf] = value
        else:
            retention["keep_local"] = {leaf: value}
        doc["retention"] = retention
        doc["remote"] = {"url": "s3://ckpt-bounds/prefix", "endpoint_url": "http://127.0.0.1:9"}
    elif head == "retention":  # with a keep rule: max_bytes alone keeps nothing
        doc[head] = {"keep_last": 3, leaf: value} if leaf != "keep_last" else {leaf: value}
    elif head:
        doc[head] = {leaf: value}
    else:
        doc[pattern] = value
    return doc


def cases(bound: Bound) -> list[tuple[Any, bool]]:
    """(value, accepted) at and around the bound."""

    def shown(number: float) -> Any:
        return f"{number:g}%" if bound.kind == "percent" else number

    whole = bound.kind in ("count", "port", "size")
    step = 1 if whole else 0.001 if bound.kind == "percent" else 0.5
    out = [(shown(bound.low), not bound.above), (shown(bound.high), True)]
    out += [(shown(bound.low - step), bound.off and bound.low - step == 0)]
    if bound.high < MAX_SIZE:
        out.append((shown(bound.high + step), False))
    out.append((shown(TWENTY_DIGITS), False))
    if bound.low > 1e-9 or bound.above:
        out.append((shown(1e-9), False))
    if bound.off:
        out.append((shown(0), True))
    if bound.above:
        out.append((shown(bound.low + step), True))
    return out


def check_all(tmp_path: Path, docs: list[tuple[str, Any, bool, dict]]) -> list[str]:
    paths = []
    for i, (_pattern, _value, _ok, doc) in enumerate(docs):
        path = tmp_path / f"c{i:03d}.yaml"
        path.write_text(yaml.safe_dump(doc))
        paths.append(str(path))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *paths], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    problems = []
    for (pattern, value, ok, _doc), (_path, code, err) in zip(
        docs, json.loads(done.stdout), strict=True
    ):
        if ok and code != 0:
            problems.append(f"{pattern}: {value!r} refused ({code}): {err.strip()}")
        if not ok and (code != 2 or "config: " not in err):
            problems.append(f"{pattern}: {value!r} not refused with exit 2 ({code}): {err!r}")
        if not ok and code == 2 and pattern.split(".")[-1].split("[")[0] not in err:
            problems.append(f"{pattern}: {value!r}: the error names no key: {err.strip()}")
    return problems


def test_every_numeric_key_is_bounded_on_the_cli(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    docs = [
        (pattern, value, ok, document(root, pattern, value))
        for pattern, bounds in NUMERIC_KEYS.items()
        for bound in bounds
        for value, ok in cases(bound)
    ]
    # A policy is the same keys under a root and in a `runs:` rule.
    for value in (0, TWENTY_DIGITS):
        docs.append(
            ("roots[].retention.keep_last", value, False, {
                "roots": [{"path": str(root), "retention": {"keep_last": value}}]
            })
        )  # fmt: skip
        docs.append(
            ("runs[].retention.keep_daily", value, False, {
                "roots": [str(root)], "runs": [{"match": "*", "retention": {"keep_daily": value}}]
            })
        )  # fmt: skip
    problems = check_all(tmp_path, docs)
    assert not problems, f"{len(problems)} of {len(docs)} wrong:\n" + "\n".join(problems)


def test_the_issues_values_are_refused_with_the_key_and_the_bounds(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    for text, key, said in (
        (f"roots: [{root}]\nmin_free: 1e-9%\n", "min_free", "between 0.01% and 99%"),
        (
            f"roots: [{root}]\nversions: {{keep_previous: 12345678901234567890}}\n",
            "versions.keep_previous",
            "a whole number from 1 to 1,000",
        ),
    ):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "ckpt_daemon", "config", "check", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"ckpt: error: config: {key}: must be {said}"), line
