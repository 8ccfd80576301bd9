"""The checkpoint pipeline's decisions, without I/O: which stages a complete checkpoint gets
(`due`), a stage's argv with its placeholders filled (`argv_for`), what a stage's output says
(`parse_result`: its last line of JSON), the metric names its results take (`<stage>:<name>`),
when a failed attempt may run again (`backoff_seconds`), and whether a checkpoint is its run's
final one (`final_verdict`, for `on: final`)."""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Checkpoint

# Our own stages, run as `ckpt` commands in a child (the same code and rail as by hand).
BUILT_IN_STAGES = ("verify", "split", "tier", "integrity")
BUILT_IN_ARGV = {name: (name, "{path}", "--json") for name in BUILT_IN_STAGES}  # ckpt NAME PATH
PLACEHOLDERS = ("path", "run", "epoch", "step", "format", "id", "stage", "artifact")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
STATES = ("pending", "running", "done", "failed", "cancelled", "skipped")
OPEN_STATES = ("pending", "running")
MAX_METRICS = 256  # a stage's result line: more metrics than this is refused, not truncated
RESULT_LINE_MAX = 1 << 20  # the last line of JSON is parsed only when this short


FINAL_QUIET_SECONDS = 1800.0  # `on: final`: a run this quiet (no save, no writer) has ended


@dataclass(frozen=True)
class Trigger:
    kind: str  # complete | new_best | every | final
    metric: str | None = None  # new_best's metric
    every: int | None = None  # every N epochs
    # final's: how long a run with no save and no process writing in its folder has been quiet
    # before it is taken as ended (`on: {final: 10m}`; `on: final`: FINAL_QUIET_SECONDS)
    quiet_seconds: float = FINAL_QUIET_SECONDS


@dataclass(frozen=True)
class Stage:
    """One stage of `pipeline:` (settings.pipeline validates it)."""

    name: str
    trigger: Trigger
    runs: str = "*"  # a glob over run names
    command: tuple[str, ...] = ()  # argv with {placeholders} (empty: `uses`)
    uses: str | None = None  # a built-in stage: verify, split, tier, integrity
    needs: tuple[str, ...] = ()  # stages that must be done first, on the same checkpoint
    timeout_seconds: float = 3600.0
    retries: int = 0  # further attempts after a failure (with backoff)
    concurrency: int = 1  # jobs of this stage at once on one host
    runs_on: tuple[str, ...] = ()  # labels a host must have (service.labels)

    @property
    def metric_prefix(self) -> str:
        """What its metrics are named under: its name, but `integrity` for the built-in
        integrity stage whatever it is called (`core.health` reads `integrity:*`)."""
        return "integrity" if self.uses == "integrity" else self.name

    def wants_artifact(self) -> bool:
        """Whether its command names `{artifact}`: the inference artifact is made first."""
        return any("{artifact}" in arg for arg in self.command)


@dataclass(frozen=True)
class StageResult:
    """What a stage's last line of JSON said: `{"metrics": {...}, "artifacts": [...], "note"}`."""

    metrics: dict[str, float | None] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()
    note: str | None = None


def metric_name(stage: str, printed: str) -> str:
    """A stage's metric in the catalog: `eval` printing `accuracy` gives `eval:accuracy`, so it
    never shadows a logged `accuracy` (a name already prefixed `eval:` is kept as printed)."""
    return printed if printed.startswith(f"{stage}:") else f"{stage}:{printed}"


def not_due(stage: Stage, checkpoint: Checkpoint, *, is_best: bool) -> str | None:
    """Why `stage` does not run on this complete checkpoint, or None when it does (`is_best`:
    the checkpoint is its run's best by the trigger's metric, for `new_best`). Decided once per
    checkpoint generation, when it is complete, and recorded as a `skipped` job."""
    if not fnmatch.fnmatchcase(checkpoint.run, stage.runs):
        return f"run {checkpoint.run} does not match {stage.runs}"
    trigger = stage.trigger
    if trigger.kind == "every":
        if checkpoint.epoch is None:
            return "its epoch is unknown"
        if checkpoint.epoch % (trigger.every or 1):
            return f"epoch {checkpoint.epoch} is not a multiple of {trigger.every}"
    if trigger.kind == "new_best" and not is_best:
        return f"not its run's best by {trigger.metric} when it was complete"
    return None


def argv_for(
    stage: Stage, checkpoint: Checkpoint, ckpt_command: Iterable[str], artifact: str = ""
) -> list[str]:
    """The child's argv: the stage's `command`, or for a built-in stage our own `ckpt` command
    (`ckpt_command`, e.g. `python -m ckpt_daemon`), each placeholder filled from the row."""
    values = {**placeholder_values(stage, checkpoint), "artifact": artifact}
    template = stage.command or BUILT_IN_ARGV[stage.uses or ""]
    # Only our own `{name}`s are filled: any other brace stays as written (a `python -c` with
    # a JSON literal, a shell-less awk program).
    filled = [PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), a) for a in template]
    return filled if stage.command else [*ckpt_command, *filled]


def placeholder_values(stage: Stage, checkpoint: Checkpoint) -> dict[str, str]:
    return {
        "path": checkpoint.path,
        "run": checkpoint.run,
        "epoch": "" if checkpoint.epoch is None else str(checkpoint.epoch),
        "step": "" if checkpoint.step is None else str(checkpoint.step),
        "format": checkpoint.format.value if checkpoint.format else "",
        "id": str(checkpoint.id),
        "stage": stage.name,
    }


def environment(stage: Stage, checkpoint: Checkpoint) -> dict[str, str]:
    """The `CKPT_*` variables a stage's child gets beside the daemon's environment."""
    return {f"CKPT_{k.upper()}": v for k, v in placeholder_values(stage, checkpoint).items()}


def parse_result(stage: str, stdout_tail: str) -> StageResult | str | None:
    """The stage's result from the last non-empty line of its output, when that line is a JSON
    object; a reason (str) when it is one but malformed; None when the stage printed none."""
    lines = [line for line in stdout_tail.splitlines() if line.strip()]
    if not lines or len(lines[-1]) > RESULT_LINE_MAX or not lines[-1].lstrip().startswith("{"):
        return None
    try:
        document = json.loads(lines[-1])
    except ValueError as exc:
        return f"its last line is not JSON: {exc}"
    if not isinstance(document, dict):
        return None
    return _result(stage, document)


def _result(stage: str, document: Mapping[str, Any]) -> StageResult | str:
    raw_metrics = document.get("metrics", {})
    if not isinstance(raw_metrics, dict) or len(raw_metrics) > MAX_METRICS:
        return f"`metrics` must be an object of at most {MAX_METRICS} numbers"
    metrics: dict[str, float | None] = {}
    for name, value in raw_metrics.items():
        if not isinstance(name, str) or not name or len(name) > 100:
            return f"metric name {name!r}: expected a name of 1 to 100 characters"
        if isinstance(value, bool) or not isinstance(value, int | float | None):
            return f"metric {name!r}: {value!r} is not a number"
        number = None if value is None or math.isnan(value) else float(value)
        metrics[metric_name(stage, name)] = number
    artifacts = document.get("artifacts", [])
    if not isinstance(artifacts, list) or not all(isinstance(a, str) for a in artifacts):
        return "`artifacts` must be a list of paths or URLs"
    note = document.get("note")
    return StageResult(metrics, tuple(artifacts[:100]), None if note is None else str(note)[:500])


def backoff_seconds(attempts: int) -> float:
    """How long a failed job waits before its next attempt: 10 s, 20 s, 40 s, ... 30 min."""
    return float(min(10 * 2 ** max(attempts - 1, 0), 1800))


@dataclass(frozen=True)
class RunEnd:
    """What is observed of a checkpoint's run for the `final` trigger (usecases.run_end)."""

    newest: int | None  # the id of its newest complete checkpoint: the last written
    newest_path: str | None = None
    last_save: float | None = None  # the newest mtime of any save of the run, complete or not
    in_flight: int = 0  # saves of the run not complete yet, or not indexed again since
    writers: int = 0  # files in the run's folder some process holds open for writing
    trainer_ended: str | None = None  # the framework's own record that training finished


def final_verdict(trigger: Trigger, checkpoint_id: int, run: RunEnd, now: float) -> tuple[str, str]:
    """Whether a complete checkpoint is its run's final one: ("final", why), ("skip", why) when
    a newer one was saved after it (decided for good), or ("wait", why) while the run may still
    be training. A run has ended when the framework's own record says so (an HF
    `trainer_state.json` at `max_steps`), or once it has been quiet `trigger.quiet_seconds`:
    no save, none in flight, no process writing in its folder. A run that resumes and ends
    again has a newer final checkpoint: that one is final too."""
    if run.newest != checkpoint_id:
        return "skip", f"not its run's final checkpoint: {run.newest_path} was saved after it"
    if run.in_flight:
        return "wait", f"{run.in_flight} save(s) of its run in flight"
    if run.trainer_ended:
        return "final", run.trainer_ended
    if run.writers:
        return "wait", f"{run.writers} file(s) open for writing in its run's folder"
    quiet = now - (run.last_save if run.last_save is not None else now)
    if quiet < trigger.quiet_seconds:
        return "wait", f"its run saved {quiet:.0f} s ago (ended after {trigger.quiet_seconds:g} s)"
    return "final", f"its run has been quiet {quiet:.0f} s, with no process writing in its folder"


def trainer_ended(training_config: Mapping[str, Any] | None) -> str | None:
    """The framework's record that training finished, where its checkpoint keeps one: a Hugging
    Face Trainer's `trainer_state.json` whose global_step reached max_steps. (Lightning and
    Keras checkpoints record no planned length: their runs end by quiet time alone.)"""
    state = (training_config or {}).get("trainer_state")
    if not isinstance(state, Mapping):
        return None
    step, most = state.get("global_step"), state.get("max_steps")
    if isinstance(step, int) and isinstance(most, int) and 0 < most <= step:
        return f"trainer_state.json: global_step {step} of max_steps {most}"
    return None
