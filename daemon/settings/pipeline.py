"""The `pipeline:` section of config.yaml: the stages run on each complete checkpoint (a command
of the user's, or a built-in stage of ours), when, for which runs, on which hosts, with what time
limit and retries; and `service.labels`, the host's labels a stage's `runs_on` asks for.
Validated whole: a bad stage is refused with its key path and the reason (exit 2)."""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import ConfigError
from ..core.pipeline import BUILT_IN_STAGES, PLACEHOLDERS, Stage, Trigger
from .bounds import bounded
from .values import choice, mapping, strings

STAGE_KEYS = {
    "name",
    "on",
    "runs",
    "command",
    "uses",
    "needs",
    "timeout",
    "retries",
    "concurrency",
    "runs_on",
}
TRIGGERS = ("complete", "new_best", "every", "final")
STAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")  # also the prefix of its metrics


def parse_pipeline(value: Any) -> tuple[Stage, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError("pipeline", "expected a list of stages")
    stages: list[Stage] = []
    for i, raw_stage in enumerate(value):
        stage = _stage(raw_stage, f"pipeline[{i}]", {s.name for s in stages})
        stages.append(stage)
    return tuple(stages)


def parse_labels(value: Any) -> tuple[str, ...]:
    """`service.labels`: what this host offers the stages' `runs_on` (e.g. [gpu])."""
    return () if value is None else strings(value, "service.labels")


def _stage(value: Any, key: str, earlier: set[str]) -> Stage:
    if isinstance(value, dict) and True in value and "on" not in value:
        # YAML 1.1 (PyYAML) reads a bare `on:` key as the boolean true, as for hooks
        value = {("on" if k is True else k): v for k, v in value.items()}
    raw = mapping(value, key, STAGE_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not STAGE_NAME.match(name):
        raise ConfigError(
            f"{key}.name", "expected a name of letters, digits, _ and - (it prefixes its metrics)"
        )
    if name in earlier:
        raise ConfigError(f"{key}.name", f"a second stage named {name!r}")
    command, uses = raw.get("command"), raw.get("uses")
    if (command is None) == (uses is None):
        raise ConfigError(key, "give either `command` (argv) or `uses` (a built-in stage)")
    argv = strings(command, f"{key}.command") if command is not None else ()
    for j, arg in enumerate(argv):
        for field in re.findall(r"\{(\w*)\}", arg):
            if field not in PLACEHOLDERS:
                raise ConfigError(
                    f"{key}.command[{j}]",
                    f"unknown placeholder {{{field}}}: one of {', '.join(PLACEHOLDERS)}",
                )
    built_in = choice(uses, f"{key}.uses", BUILT_IN_STAGES) if uses is not None else None
    if name == "integrity" and built_in != "integrity":
        raise ConfigError(
            f"{key}.name",
            "integrity is the built-in integrity stage's name (its metrics are the "
            "checkpoint's health): give it `uses: integrity`, or another name",
        )
    needs = strings(raw["needs"], f"{key}.needs") if "needs" in raw else ()
    for j, need in enumerate(needs):
        if need not in earlier:
            raise ConfigError(f"{key}.needs[{j}]", f"no earlier stage named {need!r}")
    runs = raw.get("runs", "*")
    if not isinstance(runs, str) or not runs:
        raise ConfigError(f"{key}.runs", "expected a glob of run names, e.g. exp*")
    return Stage(
        name=name,
        trigger=_trigger(raw.get("on", "complete"), f"{key}.on"),
        runs=runs,
        command=argv,
        uses=built_in,
        needs=needs,
        timeout_seconds=float(bounded(raw.get("timeout", "1h"), f"{key}.timeout")),
        retries=int(bounded(raw.get("retries", 0), f"{key}.retries")),
        concurrency=int(bounded(raw.get("concurrency", 1), f"{key}.concurrency")),
        runs_on=strings(raw["runs_on"], f"{key}.runs_on") if "runs_on" in raw else (),
    )


def _trigger(value: Any, key: str) -> Trigger:
    """`complete`, `final`, `{new_best: METRIC}`, `{every: N}` (epochs) or `{final: QUIET}`
    (how long a run with no save and no writer is quiet before it is taken as ended)."""
    if value in ("complete", "final"):
        return Trigger(value)
    if isinstance(value, dict) and len(value) == 1:
        ((kind, arg),) = value.items()
        choice(kind, key, TRIGGERS[1:])
        if kind == "new_best":
            if not isinstance(arg, str) or not arg.strip():
                raise ConfigError(f"{key}.new_best", "expected a metric name, e.g. val_loss")
            return Trigger("new_best", metric=arg)
        if kind == "final":
            return Trigger("final", quiet_seconds=float(bounded(arg, f"{key}.final")))
        return Trigger("every", every=int(bounded(arg, f"{key}.every")))
    raise ConfigError(
        key, "expected complete, final, {new_best: METRIC}, {every: N} (epochs) or {final: QUIET}"
    )
