"""Vocabularies as types: a checkpoint's format is a `Format`, a background job a `JobName`.

A string literal spelling a format or a job name in a comparison is a second copy of the
vocabulary that a rename would miss; these tests find such copies in the source and check that
every consumer of the registries (config keys, scheduler, jobs thread, catalog rows) agrees."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from ckpt_daemon.api import open_catalog
from ckpt_daemon.core.model import Format, Job, JobName, Rescan
from ckpt_daemon.service.jobs import Jobs
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.settings.schedule import SCHEDULE_KEYS, Schedule

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
PACKAGE = REPO / "daemon"
FORMAT_NAMES = {f.value for f in Format}
JOB_NAMES = {j.value for j in JobName}


def _literals(node: ast.expr) -> set[str]:
    """String constants compared against: `x == "a"`, `x in ("a", "b")`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)} - {None}
    return set()


def _compared_literals(vocabulary: set[str], folder: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for operand in (node.left, *node.comparators):
                    for literal in _literals(operand) & vocabulary:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {literal!r}")
    return found


def test_formats_are_compared_as_the_enum_never_as_strings() -> None:
    assert _compared_literals(FORMAT_NAMES) == []


def test_job_names_are_compared_as_the_enum_never_as_strings() -> None:
    # In the service, which runs the jobs. Elsewhere the same words name other things that
    # are compared as strings: "purge" an audit action, "retention" a config section.
    assert _compared_literals(JOB_NAMES, PACKAGE / "service") == []


def test_the_schedule_has_one_key_per_job_and_the_shipped_config_sets_each() -> None:
    expected = JOB_NAMES | {"misfire_grace", "remote_sample"}
    assert {f.name for f in fields(Schedule)} == expected
    assert set(SCHEDULE_KEYS) == expected
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())["schedule"]
    assert set(shipped) == expected


def test_a_schedule_key_reaches_its_job(tmp_path: Path) -> None:
    """Each job's interval comes from its own key, and each timer enqueues its own job."""
    seconds = {job: 60.0 * (i + 1) for i, job in enumerate(JobName)}
    schedule = "".join(f"  {job}: {int(s)}s\n" for job, s in seconds.items())
    path = tmp_path / "config.yaml"
    path.write_text(
        f"state_dir: {tmp_path / 'state'}\nroots:\n  - path: {tmp_path / 'runs'}\n"
        f"retention: {{keep_last: 3}}\nartifacts: {{split_after: 1h}}\nschedule:\n{schedule}"
        "remote: {url: s3://ckpt-test-bucket/team}\n"  # the remote_verify job needs a store
    )
    config = config_module.load(str(path))
    assert {job: config.schedule.every(job) for job in JobName} == seconds
    enqueued: list[Rescan | Job] = []
    jobs = Jobs(enqueued.append)
    jobs.reschedule(config)  # adds the timers without starting the scheduler's thread
    timers = {t.id: t for t in jobs._scheduler.get_jobs()}
    assert set(timers) == JOB_NAMES
    for job in JobName:
        assert timers[job].trigger.interval.total_seconds() == seconds[job]
        timers[job].func(*timers[job].args)
    assert enqueued[0] == Rescan("scheduled rescan")
    assert [item.name for item in enqueued[1:] if isinstance(item, Job)] == list(JobName)[1:]


def test_catalog_rows_carry_the_enum_and_print_its_string(scanned: Any) -> None:
    """`scanned`: the shared workspace where every generated checkpoint was scanned."""
    catalog = open_catalog(str(scanned.config))
    formats = {c.format for c in catalog.list()}
    assert formats and all(isinstance(f, Format) for f in formats), formats
    printed = {row["format"] for row in scanned.json("list")}
    assert printed == {f.value for f in formats}
    assert json.dumps(sorted(formats)) == json.dumps(sorted(f.value for f in formats))
