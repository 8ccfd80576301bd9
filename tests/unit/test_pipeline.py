"""Issue 43: the pipeline's pure decisions (core.pipeline) and its config (settings.pipeline):
which stages a complete checkpoint gets, the argv a stage runs, what a stage's last line says,
and the stage definitions refused with their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.core.model import Checkpoint, CheckpointStatus, Format
from ckpt_daemon.core.pipeline import (
    RunEnd,
    Stage,
    StageResult,
    Trigger,
    argv_for,
    backoff_seconds,
    environment,
    final_verdict,
    not_due,
    parse_result,
    trainer_ended,
)
from ckpt_daemon.settings import config


def checkpoint(**fields: object) -> Checkpoint:
    base: dict[str, object] = dict(
        id=7,
        path="/r/exp1/ckpt_epoch004.pt",
        run="exp1",
        root="/r",
        format=Format.TORCH_ZIP,
        kind="checkpoint",
        status=CheckpointStatus.OK,
        reason=None,
        size_bytes=10,
        mtime=0.0,
        inode=1,
        hash="h",
        indexed_at=None,
        epoch=4,
        step=40,
    )
    return Checkpoint(**{**base, **fields})  # type: ignore[arg-type]


def test_which_checkpoints_a_stage_runs_on() -> None:
    every = Stage("e", Trigger("every", every=2), command=("x",))
    assert not_due(every, checkpoint(), is_best=False) is None
    assert not_due(every, checkpoint(epoch=3), is_best=False) == "epoch 3 is not a multiple of 2"
    assert not_due(every, checkpoint(epoch=None), is_best=False) == "its epoch is unknown"
    best = Stage("b", Trigger("new_best", metric="val_loss"), command=("x",))
    assert not_due(best, checkpoint(), is_best=True) is None
    assert "not its run's best by val_loss" in (not_due(best, checkpoint(), is_best=False) or "")
    runs = Stage("c", Trigger("complete"), runs="sweep*", command=("x",))
    assert not_due(runs, checkpoint(), is_best=False) == "run exp1 does not match sweep*"


def test_the_argv_fills_only_our_placeholders() -> None:
    stage = Stage(
        "eval",
        Trigger("complete"),
        command=("python", "-c", 'print({"a": 1})', "{path}", "--step={step}", "{nope}"),
    )
    argv = argv_for(stage, checkpoint(step=None), ["ckpt"])
    assert argv == [
        "python",
        "-c",
        'print({"a": 1})',
        "/r/exp1/ckpt_epoch004.pt",
        "--step=",
        "{nope}",
    ]
    built_in = Stage("v", Trigger("complete"), uses="verify")
    assert argv_for(built_in, checkpoint(), ["py", "-m", "ckpt_daemon"]) == [
        "py",
        "-m",
        "ckpt_daemon",
        "verify",
        "/r/exp1/ckpt_epoch004.pt",
        "--json",
    ]
    env = environment(stage, checkpoint())
    assert env["CKPT_PATH"] == "/r/exp1/ckpt_epoch004.pt" and env["CKPT_EPOCH"] == "4"


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            'noise\n{"metrics": {"acc": 0.9, "eval:loss": 0.1}}\n',
            StageResult({"eval:acc": 0.9, "eval:loss": 0.1}),
        ),
        (
            '{"metrics": {"acc": NaN}, "note": "n", "artifacts": ["s3://b/k"]}',
            StageResult({"eval:acc": None}, ("s3://b/k",), "n"),
        ),
        ("no json at all\n", None),
        ('{"metrics": {"acc": "high"}}', "metric 'acc': 'high' is not a number"),
        ('{"metrics": {"acc": true}}', "metric 'acc': True is not a number"),
        ('{"metrics": [1]}', "`metrics` must be an object of at most 256 numbers"),
        ('{"metrics": {}, "artifacts": [1]}', "`artifacts` must be a list of paths or URLs"),
    ],
)
def test_a_stage_reports_on_its_last_line(output: str, expected: object) -> None:
    assert parse_result("eval", output) == expected


def test_a_truncated_result_line_is_a_reason_not_a_crash() -> None:
    said = parse_result("eval", '{"metrics": {"acc": 0.')
    assert isinstance(said, str) and said.startswith("its last line is not JSON")


def test_retries_back_off() -> None:
    assert [backoff_seconds(n) for n in (1, 2, 3, 10, 100)] == [10, 20, 40, 1800, 1800]


@pytest.mark.parametrize(
    ("stage", "key", "said"),
    [
        (
            "{name: a, command: [x, '{nope}']}",
            "pipeline[0].command[1]",
            "unknown placeholder {nope}",
        ),
        ("{name: a}", "pipeline[0]", "either `command`"),
        ("{name: a, command: [x], uses: split}", "pipeline[0]", "either `command`"),
        (
            "{name: a, uses: vacuum}",
            "pipeline[0].uses",
            "not one of verify, split, tier, integrity",
        ),
        ("{name: integrity, uses: split}", "pipeline[0].name", "built-in integrity stage"),
        ("{name: a, uses: split, needs: [b]}", "pipeline[0].needs[0]", "no earlier stage"),
        ("{name: a, uses: split, on: finally}", "pipeline[0].on", "expected complete, final"),
        ("{name: a, uses: split, on: {final: 1h, x: 1}}", "pipeline[0].on", "{final: QUIET}"),
        ("{name: a, uses: split, on: {new_best: ''}}", "pipeline[0].on.new_best", "metric name"),
        ("{name: 'a b', uses: split}", "pipeline[0].name", "letters, digits"),
        ("{name: a, uses: split, colour: red}", "pipeline[0].colour", "unknown key"),
    ],
)
def test_bad_stages_are_refused_with_their_key(stage: str, key: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config.parse(f"roots: [/a]\npipeline: [{stage}]\n", base=Path("/"), source="t")
    assert caught.value.key == key and said in str(caught.value), str(caught.value)


def test_the_issue_s_example_is_accepted_as_written() -> None:
    text = """roots: [/a]
service: {labels: [gpu]}
pipeline:
  - name: eval
    on: complete
    runs: "exp*"
    command: ["python", "eval.py", "--ckpt", "{path}", "--step", "{step}"]
    timeout: 2h
    retries: 2
    concurrency: 1
    runs_on: [gpu]
  - name: export
    needs: [eval]
    uses: split
"""
    parsed = config.parse(text, base=Path("/"), source="t")
    eval_stage, export = parsed.pipeline
    assert (eval_stage.timeout_seconds, eval_stage.retries, eval_stage.runs_on) == (
        7200,
        2,
        ("gpu",),
    )
    assert (export.uses, export.needs, export.trigger.kind) == ("split", ("eval",), "complete")
    assert parsed.labels == ("gpu",)


def test_a_run_s_final_checkpoint_is_its_newest_once_the_run_has_ended() -> None:
    final = Trigger("final", quiet_seconds=60)
    quiet = RunEnd(newest=7, newest_path="/r/exp1/last.pt", last_save=1000.0)
    # An older checkpoint is never final: decided for good.
    assert final_verdict(final, 6, quiet, 2000.0) == (
        "skip",
        "not its run's final checkpoint: /r/exp1/last.pt was saved after it",
    )
    # The newest: final once the run has been quiet long enough, with no writer.
    assert final_verdict(final, 7, quiet, 1059.0)[0] == "wait"
    verdict, why = final_verdict(final, 7, quiet, 1060.0)
    assert verdict == "final" and "quiet 60 s" in why
    writing = RunEnd(newest=7, last_save=1000.0, writers=1)
    assert final_verdict(final, 7, writing, 9999.0) == (
        "wait",
        "1 file(s) open for writing in its run's folder",
    )
    in_flight = RunEnd(newest=7, last_save=1000.0, in_flight=1, trainer_ended="done")
    assert final_verdict(final, 7, in_flight, 9999.0)[0] == "wait"
    # The framework's own record ends the run at once, a writer still there or not.
    recorded = RunEnd(newest=7, last_save=1000.0, writers=2, trainer_ended="max_steps reached")
    assert final_verdict(final, 7, recorded, 1000.0) == ("final", "max_steps reached")


def test_a_hugging_face_run_says_it_ended_in_trainer_state() -> None:
    state = {"trainer_state": {"global_step": 6, "max_steps": 6, "epoch": 2.0}}
    assert trainer_ended(state) == "trainer_state.json: global_step 6 of max_steps 6"
    assert trainer_ended({"trainer_state": {"global_step": 4, "max_steps": 6}}) is None
    assert trainer_ended({"trainer_state": {"global_step": 4, "max_steps": -1}}) is None
    assert trainer_ended({"lightning_version": "2.4"}) is None and trainer_ended(None) is None


def test_the_final_trigger_as_written() -> None:
    text = "roots: [/a]\npipeline:\n  - {name: a, uses: split, on: final}\n"
    text += "  - {name: b, uses: split, on: {final: 10m}}\n"
    a, b = config.parse(text, base=Path("/"), source="t").pipeline
    assert (a.trigger.kind, a.trigger.quiet_seconds) == ("final", 1800.0)
    assert (b.trigger.kind, b.trigger.quiet_seconds) == ("final", 600.0)
