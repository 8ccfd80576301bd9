"""The retention planner: rule tables, a golden plan, and properties (no creeping deletion)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.core.query import default_mode
from ckpt_daemon.core.retention import (
    Item,
    KeepBest,
    Plan,
    Policy,
    format_duration,
    placed_by_save_time,
    plan,
    training_moments,
)

GB = 10**9
T0 = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday: the first day of ISO week 2024-W01


def at(hours: float = 0, **delta: float) -> float:
    """Seconds since the epoch, `hours` (plus any timedelta keywords) after T0."""
    return (T0 + timedelta(hours=hours, **delta)).timestamp()


def item(id: int, mtime: float, *, status: str = "ok", size_bytes: int = GB, **fields: Any) -> Item:
    path = f"run/ckpt-{id}.h5"
    return Item(id=id, path=path, status=status, mtime=mtime, size_bytes=size_bytes, **fields)


def table(result: Plan) -> list[tuple[int, str, tuple[str, ...]]]:
    return [(d.id, d.action, d.reasons) for d in result.decisions]


def hourly(n: int) -> list[Item]:
    return [item(i, at(i)) for i in range(1, n + 1)]


# ---- one rule at a time -------------------------------------------------------------------------


def test_keep_last_counts_newest_first_and_trashes_the_rest() -> None:
    assert table(plan(hourly(4), Policy(keep_last=2))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "trash", ("matched no keep rule",)),
        (3, "keep", ("last #2",)),
        (4, "keep", ("newest", "last #1")),
    ]


def test_the_newest_is_kept_even_when_no_rule_matches_it() -> None:
    items = [item(1, at(0), epoch=10), item(2, at(1), epoch=11)]
    assert table(plan(items, Policy(keep_every=10))) == [
        (1, "keep", ("every 10 epochs",)),
        (2, "keep", ("newest",)),
    ]


def test_keep_best_ranks_by_metric_and_formats_values() -> None:
    losses = [0.5, 0.231, 0.3, 0.1234567, 0.9]
    items = [item(i, at(i), metrics={"val_loss": v}) for i, v in enumerate(losses, start=1)]
    assert table(plan(items, Policy(keep_best=(KeepBest("val_loss", 2),)))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("best val_loss #2 (0.231)",)),
        (3, "trash", ("matched no keep rule",)),
        (4, "keep", ("best val_loss #1 (0.1235)",)),
        (5, "keep", ("newest",)),
    ]


def test_keep_best_ties_go_to_the_newer_then_the_higher_id() -> None:
    items = [
        item(1, at(0), metrics={"val_loss": 0.2}),
        item(2, at(1), metrics={"val_loss": 0.2}),
        item(3, at(1), metrics={"val_loss": 0.2}),
        item(4, at(2), metrics={"val_loss": 0.9}),
    ]
    assert table(plan(items, Policy(keep_best=(KeepBest("val_loss", 2),)))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("best val_loss #2 (0.2)",)),
        (3, "keep", ("best val_loss #1 (0.2)",)),
        (4, "keep", ("newest",)),
    ]


def test_keep_best_mode_defaults_from_the_metric_name_and_can_be_given() -> None:
    items = [item(i, at(i), metrics={"val_acc": a}) for i, a in ((1, 0.9), (2, 0.5), (3, 0.7))]
    assert table(plan(items, Policy(keep_best=(KeepBest("val_acc", 1),)))) == [
        (1, "keep", ("best val_acc #1 (0.9)",)),
        (2, "trash", ("matched no keep rule",)),
        (3, "keep", ("newest",)),
    ]
    assert table(plan(items, Policy(keep_best=(KeepBest("val_acc", 1, mode="min"),)))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("best val_acc #1 (0.5)",)),
        (3, "keep", ("newest",)),
    ]


def test_a_checkpoint_without_the_metric_is_kept_unless_the_rule_says_otherwise() -> None:
    items = [
        item(1, at(0), metrics={}),
        item(2, at(1), metrics={"val_loss": None}),
        item(3, at(2), metrics={"val_loss": math.nan}),
        item(4, at(3), metrics={"val_loss": 0.4}),
        item(5, at(4), metrics={"val_loss": 0.5}),
    ]
    missing = ("no val_loss: kept",)
    assert table(plan(items, Policy(keep_best=(KeepBest("val_loss", 1),)))) == [
        (1, "keep", missing),
        (2, "keep", missing),
        (3, "keep", missing),
        (4, "keep", ("best val_loss #1 (0.4)",)),
        (5, "keep", ("newest",)),
    ]
    strict = Policy(keep_best=(KeepBest("val_loss", 1, keep_missing=False),))
    assert [d.action for d in plan(items, strict).decisions] == ["trash"] * 3 + ["keep"] * 2


def test_several_metrics_each_rank_on_their_own() -> None:
    items = [
        item(1, at(0), metrics={"val_loss": 0.2, "val_acc": 0.7}),
        item(2, at(1), metrics={"val_loss": 0.3, "val_acc": 0.9}),
        item(3, at(2), metrics={"val_loss": 0.4, "val_acc": 0.8}),
        item(4, at(3), metrics={"val_loss": 0.5, "val_acc": 0.6}),
    ]
    policy = Policy(keep_best=(KeepBest("val_loss", 1), KeepBest("val_acc", 2)))
    assert table(plan(items, policy)) == [
        (1, "keep", ("best val_loss #1 (0.2)",)),
        (2, "keep", ("best val_acc #1 (0.9)",)),
        (3, "keep", ("best val_acc #2 (0.8)",)),
        (4, "keep", ("newest",)),
    ]


def test_keep_every_uses_the_epoch_and_falls_back_to_the_step() -> None:
    items = [
        item(1, at(0), epoch=20, step=1234),
        item(2, at(1), epoch=21, step=2000),  # has an epoch: the step is not looked at
        item(3, at(2), step=3000),
        item(4, at(3), step=3001),
        item(5, at(4)),  # neither: the rule cannot say
        item(6, at(5), epoch=0),
        item(7, at(6), epoch=31),
    ]
    assert table(plan(items, Policy(keep_every=10))) == [
        (1, "keep", ("every 10 epochs",)),
        (2, "trash", ("matched no keep rule",)),
        (3, "keep", ("every 10 steps",)),
        (4, "keep", ("newest",)),
        # No epoch nor step: placed by its save time (after step 3001), never newest for being
        # unknown (issue 39); the rule cannot say, so nothing keeps it.
        (5, "trash", ("matched no keep rule",)),
        (6, "keep", ("every 10 epochs",)),
        (7, "keep", ("newest mtime",)),
    ]


def test_keep_within_is_measured_from_the_newest_checkpoint_inclusive() -> None:
    # Years before any real clock: a window measured from "now" would keep nothing.
    base = datetime(2001, 5, 1, tzinfo=UTC).timestamp()
    hours = [0, 11.5, 12, 20, 24]
    items = [item(i, base + h * 3600) for i, h in enumerate(hours, start=1)]
    within = ("within 12h of newest",)
    assert table(plan(items, Policy(keep_within=12 * 3600))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "trash", ("matched no keep rule",)),
        (3, "keep", within),
        (4, "keep", within),
        (5, "keep", ("newest", *within)),
    ]


def test_keep_within_counts_from_the_newest_complete_checkpoint() -> None:
    # A file still being written does not move the window (nor would a corrupt one).
    items = [item(1, at(0)), item(2, at(10)), item(3, at(30), status="incomplete")]
    within = "within 12h of newest"
    assert table(plan(items, Policy(keep_within=12 * 3600))) == [
        (1, "keep", (within,)),
        (2, "keep", ("newest", within)),
        (3, "keep", ("incomplete",)),
    ]


def test_keep_daily_keeps_the_newest_of_each_of_the_last_days_that_have_checkpoints() -> None:
    items = [
        item(1, at(1)),  # 2024-01-01
        item(2, at(23)),  # 2024-01-01, newest of that day
        item(3, at(30)),  # 2024-01-02
        item(4, at(24 * 4 + 2)),  # 2024-01-05
        item(5, at(24 * 4 + 9)),  # 2024-01-05, newest of that day and of the run
        item(6, at(24 * 6 + 1)),  # 2024-01-07: only in the second plan
    ]
    assert table(plan(items[:5], Policy(keep_daily=3))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("daily #3 (2024-01-01)",)),
        (3, "keep", ("daily #2 (2024-01-02)",)),
        (4, "trash", ("matched no keep rule",)),
        (5, "keep", ("newest", "daily #1 (2024-01-05)")),
    ]
    # Day 2024-01-07 enters; 2024-01-01 falls out of the last three days that hold checkpoints.
    assert [d.action for d in plan(items, Policy(keep_daily=3)).decisions] == [
        "trash",
        "trash",
        "keep",
        "trash",
        "keep",
        "keep",
    ]


def test_keep_hourly_uses_utc_hours() -> None:
    items = [item(1, at(0, minutes=5)), item(2, at(0, minutes=55)), item(3, at(1, minutes=1))]
    assert table(plan(items, Policy(keep_hourly=5))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("hourly #2 (2024-01-01 00:00)",)),
        (3, "keep", ("newest", "hourly #1 (2024-01-01 01:00)")),
    ]


def test_keep_weekly_uses_iso_weeks() -> None:
    items = [
        item(1, at(-24 * 6)),  # Tue 2023-12-26, ISO 2023-W52
        item(2, at(-1)),  # Sun 2023-12-31 23:00, ISO 2023-W52 (the calendar year is 2023 too)
        item(3, at(1)),  # Mon 2024-01-01, ISO 2024-W01
        item(4, at(24 * 7 * 52 - 1)),  # Sun 2024-12-29, ISO 2024-W52
        item(5, at(24 * 7 * 52 + 1)),  # Mon 2024-12-30: ISO week 2025-W01
    ]
    assert table(plan(items, Policy(keep_weekly=4))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("weekly #4 (2023-W52)",)),
        (3, "keep", ("weekly #3 (2024-W01)",)),
        (4, "keep", ("weekly #2 (2024-W52)",)),
        (5, "keep", ("newest", "weekly #1 (2025-W01)")),
    ]


# ---- protections and candidates --------------------------------------------------------------


def test_pinned_and_not_ok_are_kept_and_gone_rows_are_not_planned() -> None:
    items = [
        item(1, at(0), pinned=True),
        item(2, at(1), status="corrupt"),
        item(3, at(2), status="unreadable", pinned=True),
        item(4, at(3), status="missing"),
        item(5, at(4), status="trashed"),
        item(6, at(5), status="purged"),
        item(7, at(6)),
        item(8, at(7)),
        item(9, at(8), status="incomplete"),  # newer than any ok one: not "newest", no slot
    ]
    assert table(plan(items, Policy(keep_last=1))) == [
        (1, "keep", ("pinned",)),
        (2, "keep", ("corrupt",)),
        (3, "keep", ("pinned", "unreadable")),
        (7, "trash", ("matched no keep rule",)),
        (8, "keep", ("newest", "last #1")),
        (9, "keep", ("incomplete",)),
    ]


def test_an_abandoned_save_is_trashed_with_its_reason_and_never_takes_a_slot() -> None:
    why = "save did not complete: Orbax's in-flight name; untouched for 2h with no writer"
    items = [
        item(1, at(0), step=1),
        item(2, at(1), step=2, status="abandoned", trash_reason=f"abandoned: {why}"),
        item(3, at(2), step=3, status="abandoned", pinned=True),
        item(4, at(3), step=4, status="incomplete"),  # still being written: never touched
    ]
    assert table(plan(items, Policy(keep_last=1))) == [
        (1, "keep", ("newest", "last #1")),  # the newest complete one, whatever came after
        (2, "trash", (f"abandoned: {why}",)),
        (3, "keep", ("pinned",)),
        (4, "keep", ("incomplete",)),
    ]
    alone = plan([item(5, at(0), status="abandoned")], Policy(keep_last=1))
    assert table(alone) == [(5, "trash", ("matched no keep rule",))]  # nothing ok keeps it


def test_a_run_without_ok_checkpoints_keeps_everything_and_an_empty_run_plans_nothing() -> None:
    items = [item(1, at(0), status="incomplete"), item(2, at(1), status="corrupt")]
    assert [d.action for d in plan(items, Policy(keep_last=1)).decisions] == ["keep", "keep"]
    assert plan([], Policy(keep_last=1)) == Plan(decisions=(), bytes_freed=0)


def test_reasons_list_every_rule_that_kept_a_checkpoint() -> None:
    items = [item(i, at(6 * i), epoch=i, metrics={"val_loss": 1 / i}) for i in range(1, 11)]
    policy = Policy(
        keep_last=2,
        keep_best=(KeepBest("val_loss", 2),),
        keep_every=5,
        keep_within=6 * 3600,
        keep_daily=1,
    )
    assert table(plan(items, policy))[-3:] == [
        (8, "trash", ("matched no keep rule",)),
        (9, "keep", ("last #2", "best val_loss #2 (0.1111)", "within 6h of newest")),
        (
            10,
            "keep",
            (
                "newest",
                "last #1",
                "best val_loss #1 (0.1)",
                "every 5 epochs",
                "within 6h of newest",
                "daily #1 (2024-01-03)",
            ),
        ),
    ]


def test_decisions_are_sorted_oldest_first_and_freed_bytes_add_up() -> None:
    items = [item(3, at(0), size_bytes=5), item(1, at(0), size_bytes=7), item(2, at(-1))]
    result = plan(items, Policy(keep_last=1))
    assert [d.id for d in result.decisions] == [2, 1, 3]
    assert [d.id for d in result.to_trash()] == [2, 1]
    assert result.bytes_freed == GB + 7


# ---- the budget -------------------------------------------------------------------------------


def test_budget_trashes_loose_keeps_oldest_first_then_ranked_ones_never_protected() -> None:
    items = [
        item(1, at(0), epoch=10, size_bytes=2 * GB),  # every 10: loose
        item(2, at(1), epoch=11, metrics={"val_loss": 0.1}),  # best #1: protected
        item(3, at(2), epoch=12, metrics={"val_loss": 0.2}),  # best #2: ranked
        item(4, at(3), epoch=13, pinned=True),
        item(5, at(4), epoch=14, status="incomplete", size_bytes=50 * GB),  # not counted
        item(6, at(5), epoch=15),  # last #2 and within: ranked
        item(7, at(6), epoch=16),  # newest
    ]
    best = KeepBest("val_loss", 2, keep_missing=False)
    policy = Policy(keep_last=2, keep_best=(best,), keep_every=10, keep_within=3600)
    assert plan(items, replace(policy, max_bytes=7 * GB)).to_trash() == []
    assert table(plan(items, replace(policy, max_bytes=3 * GB))) == [
        (1, "trash", ("over budget: 7.0 GB > 3.0 GB",)),
        (2, "keep", ("best val_loss #1 (0.1)",)),
        (3, "trash", ("over budget: 5.0 GB > 3.0 GB",)),
        (4, "keep", ("pinned",)),
        (5, "keep", ("incomplete",)),
        (6, "trash", ("over budget: 4.0 GB > 3.0 GB",)),
        (7, "keep", ("newest", "last #1", "within 1h of newest")),
    ]
    tight = plan(items, replace(policy, max_bytes=1 * GB))
    assert [d.id for d in tight.to_trash()] == [1, 3, 6]
    assert tight.bytes_freed == 4 * GB
    assert tight.notes == (
        "still over budget: 3.0 GB > 1.0 GB; what is left is protected "
        "(newest, pinned, not ok, or best #1 of a metric)",
    )


def test_budget_counts_a_keep_for_a_missing_metric_as_ranked() -> None:
    items = [
        item(1, at(0), epoch=5, metrics={}),  # kept by keep_best for want of val_loss: second
        item(2, at(1), epoch=10, metrics={"val_loss": 0.5}),  # kept by keep_every only: first
        item(3, at(2), epoch=11, metrics={"val_loss": 0.4}),
    ]
    policy = Policy(keep_best=(KeepBest("val_loss", 1),), keep_every=10, max_bytes=2 * GB)
    assert table(plan(items, policy)) == [
        (1, "keep", ("no val_loss: kept",)),
        (2, "trash", ("over budget: 3.0 GB > 2.0 GB",)),
        (3, "keep", ("newest", "best val_loss #1 (0.4)")),
    ]


def test_budget_leaves_trash_reasons_of_unkept_ones_alone_and_skips_empty_files() -> None:
    items = [
        item(1, at(0), epoch=1),
        item(2, at(1), epoch=10, size_bytes=0),
        item(3, at(2), epoch=20),
    ]
    result = plan(items, Policy(keep_every=10, max_bytes=GB // 2))
    assert table(result) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("every 10 epochs",)),
        (3, "keep", ("newest", "every 10 epochs")),
    ]
    assert len(result.notes) == 1


# ---- the README example, pinned ------------------------------------------------------------


def readme_run() -> list[Item]:
    """30 epochs, one every 6 hours, 3 GB each; val_loss falls, then overfits, with noise."""

    def val_loss(epoch: int) -> float:
        return round(0.3 + (epoch - 18) ** 2 / 400 + ((epoch * 7) % 11 - 5) * 0.006, 4)

    return [
        item(e, at(6 * (e - 1)), epoch=e, size_bytes=3 * GB, metrics={"val_loss": val_loss(e)})
        for e in range(1, 31)
    ]


README_POLICY = Policy(
    keep_last=3,
    keep_best=(KeepBest("val_loss", 2),),
    keep_every=10,
    keep_within=2 * 86400,
    max_bytes=50 * GB,
)
NO_RULE = ("matched no keep rule",)
WITHIN = "within 2d of newest"
README_GOLDEN = [  # (epoch, action, reasons); epoch e is also the id
    (1, "trash", NO_RULE),
    (2, "trash", NO_RULE),
    (3, "trash", NO_RULE),
    (4, "trash", NO_RULE),
    (5, "trash", NO_RULE),
    (6, "trash", NO_RULE),
    (7, "trash", NO_RULE),
    (8, "trash", NO_RULE),
    (9, "trash", NO_RULE),
    (10, "keep", ("every 10 epochs",)),
    (11, "trash", NO_RULE),
    (12, "trash", NO_RULE),
    (13, "trash", NO_RULE),
    (14, "trash", NO_RULE),
    (15, "trash", NO_RULE),
    (16, "keep", ("best val_loss #2 (0.292)",)),
    (17, "trash", NO_RULE),
    (18, "trash", NO_RULE),
    (19, "keep", ("best val_loss #1 (0.2785)",)),
    (20, "keep", ("every 10 epochs",)),
    (21, "trash", NO_RULE),  # 54 hours before the newest
    (22, "keep", (WITHIN,)),  # exactly 48 hours before the newest
    (23, "keep", (WITHIN,)),
    (24, "keep", (WITHIN,)),
    (25, "keep", (WITHIN,)),
    (26, "keep", (WITHIN,)),
    (27, "keep", (WITHIN,)),
    (28, "keep", ("last #3", WITHIN)),
    (29, "keep", ("last #2", WITHIN)),
    (30, "keep", ("newest", "last #1", "every 10 epochs", WITHIN)),
]


def test_readme_policy_golden_plan() -> None:
    result = plan(readme_run(), README_POLICY)
    assert table(result) == README_GOLDEN
    assert result.bytes_freed == 17 * 3 * GB  # 13 kept: 39 GB, under the 50 GB budget
    assert result.notes == ()
    assert README_POLICY.describe() == (
        "keep_last 3, keep_best val_loss min 2, keep_every 10, keep_within 2d, max_bytes 50.0 GB"
    )


def test_readme_policy_on_a_tight_budget() -> None:
    result = plan(readme_run(), replace(README_POLICY, max_bytes=5 * GB))
    over = {d.id: d.reasons[0] for d in result.decisions if d.reasons[0].startswith("over")}
    # Loose keeps oldest first (10, 20, 22..27), then ranked ones (16, 28, 29).
    assert list(over) == [10, 16, 20, 22, 23, 24, 25, 26, 27, 28, 29]  # listed by age
    assert over[10] == "over budget: 39.0 GB > 5.0 GB"
    assert over[27] == "over budget: 18.0 GB > 5.0 GB"
    assert over[16] == "over budget: 15.0 GB > 5.0 GB"
    assert over[29] == "over budget: 9.0 GB > 5.0 GB"
    assert [d.id for d in result.decisions if d.action == "keep"] == [19, 30]
    assert result.notes[0].startswith("still over budget: 6.0 GB > 5.0 GB")


# ---- refusals and formatting ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (Policy(), "retention policy is empty: "),
        (Policy(max_bytes=GB), "retention policy is empty: "),
        (Policy(keep_last=0), "keep_last must be a whole number of at least 1"),
        (Policy(keep_daily=-1), "keep_daily must be"),
        (Policy(keep_best=(KeepBest("val_loss", 0),)), "keep_best val_loss must be"),
        (Policy(keep_best=(KeepBest("loss", 1, mode="low"),)), "mode must be min or max"),
        (Policy(keep_best=(KeepBest("a", 1), KeepBest("a", 2))), "keep_best a: metric given twice"),
        (Policy(keep_last=1, max_bytes=0), "max_bytes must be above 0"),
        (Policy(keep_within=0), "keep_within must be a duration above 0s"),
    ],
)
def test_bad_policies_are_refused_naming_the_rule(policy: Policy, message: str) -> None:
    with pytest.raises(UsageError) as error:
        plan([item(1, at(0))], policy)
    assert message in str(error.value)


def test_duplicate_ids_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        plan([item(1, at(0)), item(1, at(1))], Policy(keep_last=1))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(172800, "2d"), (129600, "36h"), (5400, "90m"), (45, "45s"), (1.5, "1.5s"), (90.5, "90.5s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_describe_lists_every_rule_in_one_line() -> None:
    policy = Policy(
        keep_best=(KeepBest("val_acc", 1), KeepBest("f1", 2, mode="max", keep_missing=False)),
        keep_hourly=24,
        keep_daily=7,
        keep_weekly=4,
    )
    assert policy.describe() == (
        "keep_best val_acc max 1, keep_best f1 max 2 (missing not kept), "
        "keep_hourly 24, keep_daily 7, keep_weekly 4"
    )
    assert Policy().describe() == "no rule"
    assert Policy().is_empty() and Policy(max_bytes=1).is_empty()
    assert not Policy(keep_within=1).is_empty()


# ---- properties -------------------------------------------------------------------------------

GONE = ("missing", "trashed", "purged")
STATUSES = ["ok", "ok", "ok", "ok", "incomplete", "corrupt", "unreadable", *GONE]
METRICS = ("val_loss", "val_acc", "f1")
metric_value = st.one_of(
    st.none(), st.just(math.nan), st.sampled_from([0.1, 0.2, 0.3]), st.floats(-5, 5)
)


# Built once: a strategy built per example (a flatmap over the ids) spent most of the time of
# these tests constructing and validating strategies rather than running the planner.
checkpoint = st.builds(
    Item,
    id=st.just(0),  # numbered by `runs`
    path=st.just(""),
    status=st.sampled_from(STATUSES),
    # 11-hour steps over ~4 weeks: many share an hour, day or week, and some an mtime.
    mtime=st.integers(0, 60).map(lambda k: at(11 * k)),
    size_bytes=st.integers(0, 5).map(lambda g: g * GB),
    epoch=st.none() | st.integers(0, 40),
    step=st.none() | st.integers(0, 400),
    pinned=st.sampled_from([False, False, False, True]),
    metrics=st.dictionaries(st.sampled_from(METRICS), metric_value),
)


@st.composite
def numbered_run(draw: st.DrawFn) -> list[Item]:
    ids = draw(st.lists(st.integers(1, 10_000), max_size=14, unique=True))
    return [replace(draw(checkpoint), id=i, path=f"run/{i}.h5") for i in ids]


runs = numbered_run()


count = st.none() | st.integers(1, 6)


@st.composite
def policies(draw: st.DrawFn, budget: bool = True) -> Policy:
    metrics = draw(st.lists(st.sampled_from(METRICS), unique=True, max_size=2))
    modes = st.sampled_from([None, "min", "max"])
    best = tuple(
        KeepBest(m, draw(st.integers(1, 3)), draw(modes), draw(st.booleans())) for m in metrics
    )
    policy = Policy(
        keep_last=draw(count),
        keep_best=best,
        keep_every=draw(count),
        keep_within=draw(st.none() | st.integers(1, 400).map(lambda h: h * 3600.0)),
        keep_hourly=draw(count),
        keep_daily=draw(count),
        keep_weekly=draw(count),
        max_bytes=draw(st.none() | st.integers(1, 20).map(lambda g: g * GB)) if budget else None,
    )
    if policy.is_empty():
        policy = replace(policy, keep_last=draw(st.integers(1, 6)))
    return policy


def protected_ids(items: list[Item], policy: Policy) -> set[int]:
    """What the issue says is never trashed, computed here without the planner's code."""
    ok = [i for i in items if i.status == "ok"]
    ids = {i.id for i in items if i.status not in GONE and (i.pinned or i.status != "ok")}
    if ok:  # the last written, and the furthest along (an unknown epoch/step counts as +inf)
        ids.add(max(ok, key=lambda i: (i.mtime, i.id)).id)
        inf = math.inf
        # One with neither epoch nor step is placed by its save time (issue 39): the furthest
        # along is one with either, when the run has any.
        known = [i for i in ok if i.epoch is not None or i.step is not None] or ok
        progress = [
            (inf if i.epoch is None else i.epoch, inf if i.step is None else i.step) for i in known
        ]
        ids.add(
            max(zip(progress, known, strict=True), key=lambda p: (*p[0], p[1].mtime, p[1].id))[1].id
        )
        # And every file of the newest training moment (issue 39; moments as core.moments has
        # them, checked on their own above).
        ids |= {i.id for i in training_moments(placed_by_save_time(ok))[0].items}
    for rule in policy.keep_best:
        sign = -1 if (rule.mode or default_mode(rule.metric)) == "max" else 1
        valued = [(v, i) for i in ok if (v := i.metrics.get(rule.metric)) is not None]
        ranked = sorted((sign * v, -i.mtime, -i.id, i.id) for v, i in valued if not math.isnan(v))
        if ranked:
            ids.add(ranked[0][-1])
    return ids


def trashed(result: Plan) -> set[int]:
    return {d.id for d in result.to_trash()}


@given(runs, policies())
def test_one_decision_per_candidate_each_with_reasons(items: list[Item], policy: Policy) -> None:
    result = plan(items, policy)
    candidates = [i.id for i in items if i.status not in GONE]
    assert sorted(d.id for d in result.decisions) == sorted(candidates)
    for decision in result.decisions:
        assert decision.action in ("keep", "trash") and decision.reasons
        if decision.action == "trash":
            assert len(decision.reasons) == 1
            reason = decision.reasons[0]
            assert reason == "matched no keep rule" or reason.startswith("over budget: ")
    assert result.bytes_freed == sum(d.size_bytes for d in result.to_trash())


@given(runs, policies())
def test_protected_checkpoints_are_never_trashed(items: list[Item], policy: Policy) -> None:
    result = plan(items, policy)
    assert not trashed(result) & protected_ids(items, policy)
    if policy.max_bytes is not None:
        kept = {d.id for d in result.decisions if d.action == "keep"}
        total = sum(i.size_bytes for i in items if i.id in kept and i.status == "ok")
        if total > policy.max_bytes:
            unprotected = [
                i for i in items if i.id in kept and i.id not in protected_ids(items, policy)
            ]
            assert result.notes and all(i.size_bytes == 0 for i in unprotected)


@given(runs, policies(), st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_input_order(
    items: list[Item], policy: Policy, rnd: random.Random
) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert plan(shuffled, policy) == plan(items, policy)


@given(runs, policies())
def test_replanning_the_survivors_trashes_nothing_more(items: list[Item], policy: Policy) -> None:
    gone = trashed(plan(items, policy))
    survivors = [i for i in items if i.id not in gone]
    assert plan(survivors, policy).to_trash() == []


@given(runs, policies(budget=False), policies(budget=False))
def test_adding_a_keep_rule_never_trashes_more(
    items: list[Item], policy: Policy, extra: Policy
) -> None:
    widened = widen(policy, extra)
    assert trashed(plan(items, widened)) <= trashed(plan(items, policy))


def widen(policy: Policy, extra: Policy) -> Policy:
    """`policy` plus every rule of `extra`; where both have a rule, the one that keeps more."""
    names = ("keep_last", "keep_within", "keep_hourly", "keep_daily", "keep_weekly")
    changes: dict[str, Any] = {
        name: max(v for v in (getattr(policy, name), getattr(extra, name)) if v is not None)
        for name in names
        if getattr(policy, name) is not None or getattr(extra, name) is not None
    }
    if policy.keep_every is None:  # every 5 does not keep what every 10 keeps: add, never change
        changes["keep_every"] = extra.keep_every
    present = {rule.metric for rule in policy.keep_best}
    changes["keep_best"] = policy.keep_best + tuple(
        rule for rule in extra.keep_best if rule.metric not in present
    )
    return replace(policy, **changes)


def test_over_budget_demotes_before_it_trashes() -> None:
    gb = 10**9
    items = [
        Item(
            id=i,
            path=f"/r/e{i}.keras",
            status="ok",
            mtime=1_700_000_000.0 + i * 3600,
            size_bytes=3 * gb,
            epoch=i,
            inference_bytes=gb,
        )
        for i in (1, 2, 3)
    ]
    decided = {d.id: d for d in plan(items, Policy(keep_last=3, max_bytes=6 * gb)).decisions}
    assert [decided[i].action for i in (1, 2, 3)] == ["demote", "demote", "keep"]
    assert decided[1].reasons == (
        "over budget: 9.0 GB > 6.0 GB: demoted to its inference artifact",
    )
    assert decided[2].reasons == (
        "over budget: 7.0 GB > 6.0 GB: demoted to its inference artifact",
    )
    assert decided[1].size_bytes == 2 * gb  # what demotion frees
    # Not enough room even after demoting: the oldest then goes entirely.
    tight = {d.id: d for d in plan(items, Policy(keep_last=3, max_bytes=4 * gb)).decisions}
    assert [tight[i].action for i in (1, 2, 3)] == ["trash", "demote", "keep"]
    assert plan(items, Policy(keep_last=3, max_bytes=4 * gb)).bytes_freed == 3 * gb + 2 * gb


# ---- training moments (issue 21): last, every and within count epochs, not files --------------


def first_hour_run() -> list[Item]:
    """The first hour's flat folder: per epoch 1-10 `model-0EE.keras` and `w-EE.weights.h5`
    written together, and `best.h5` (last rewritten at epoch 10), all with an epoch."""
    items = []
    for epoch in range(1, 11):
        items.append(item(2 * epoch, at(epoch), epoch=epoch))  # model-0EE
        items.append(item(2 * epoch + 1, at(epoch, seconds=1), epoch=epoch))  # w-EE
    items.append(item(99, at(10, seconds=2), epoch=10))  # best.h5
    return items


def kept(result: Plan) -> dict[int, tuple[str, ...]]:
    return {d.id: d.reasons for d in result.decisions if d.action == "keep"}


def test_keep_last_keeps_every_file_of_the_last_epochs() -> None:
    """`--keep-last 3` kept best.h5, w-10 and model-010: one epoch. It keeps epochs 8-10."""
    result = kept(plan(first_hour_run(), Policy(keep_last=3)))
    assert set(result) == {16, 17, 18, 19, 20, 21, 99}
    assert result[16] == result[17] == ("last #3 (epoch 8: 2 files)",)
    assert result[99] == ("newest", "last #1 (epoch 10: 3 files)")
    # Every file of the newest training moment is protected (issue 39), and says so.
    moment = "newest training moment (epoch 10: 3 files)"
    assert result[20] == (moment, "last #1 (epoch 10: 3 files)")


def test_keep_every_and_within_keep_whole_epochs_and_say_so() -> None:
    items = first_hour_run()
    every = kept(plan(items, Policy(keep_every=5)))
    assert {i for i, r in every.items() if "every 5 epochs (epoch 5: 2 files)" in r} == {10, 11}
    assert {i for i, r in every.items() if "every 5 epochs (epoch 10: 3 files)" in r} == {
        20,
        21,
        99,
    }
    # w-09 is 3601 s before best.h5, model-009 1 s earlier: epoch 9 is within, whole.
    within = kept(plan(items, Policy(keep_within=3601)))
    assert set(within) == {18, 19, 20, 21, 99}
    assert within[18] == ("within 3601s of newest (epoch 9: 2 files)",)


def test_a_step_less_file_joins_its_epochs_last_step_and_unknown_progress_is_placed_by_time() -> (
    None
):
    items = [
        item(1, at(1), epoch=1, step=3),
        item(2, at(2), epoch=1),  # epoch end, no step: the moment of step 3
        item(3, at(3), epoch=2, step=4),  # mid-epoch 2
        item(4, at(4), epoch=2, step=6),
        item(5, at(5)),  # nothing known: a moment of its own, placed by its save time (issue 39)
        item(6, at(6)),
    ]
    result = kept(plan(items, Policy(keep_last=2)))
    assert set(result) == {4, 6}  # epoch 2 step 6 is newest; 6 the newest mtime and last #2
    assert result[4][0] == "newest"
    result = kept(plan(items, Policy(keep_last=4)))
    assert set(result) == {3, 4, 5, 6}
    result = kept(plan(items, Policy(keep_last=5)))
    assert result[1] == result[2] == ("last #5 (epoch 1: 2 files)",)


@settings(deadline=None)  # a loaded 2-core machine: no time limit per example
@given(runs, st.integers(1, 6))
def test_keep_last_keeps_whole_moments_and_exactly_n_of_them(items: list[Item], n: int) -> None:
    ok = [i for i in items if i.status == "ok"]
    moments = training_moments(placed_by_save_time(ok))
    result = kept(plan(items, Policy(keep_last=n)))
    by_last = {i for i, reasons in result.items() if any(r.startswith("last #") for r in reasons)}
    for moment in moments:
        ids = {i.id for i in moment.items}
        assert ids <= by_last or not ids & by_last  # all of a moment's files or none
    assert by_last == {i.id for m in moments[:n] for i in m.items}
    assert sum(len(m.items) for m in moments) == len(ok)  # every ok file is at one moment


# ---- the remote tier (core.tier_plan) ------------------------------------------------------------


def test_the_ladder_demotes_then_tiers_then_trashes_and_keep_local_stays() -> None:
    """Over budget: demotion first, then the remote tier (not what keep_local keeps, not one
    that cannot tier), then trashing; by age (`tier_after`, from `now`): kept ones tier, with
    their keep reasons, and what stays local says why."""
    vl = {1: 0.5, 2: 0.1, 3: 0.4, 4: 0.3, 5: 0.2}
    items = [
        item(i, at(i), metrics={"val_loss": vl[i]}, tier_blocked=None if i != 3 else "format x")
        for i in range(1, 6)
    ]
    items[0] = replace(items[0], inference_bytes=GB // 2)
    from ckpt_daemon.core.tier_plan import KeepLocal

    local = KeepLocal(last=1, best=1)
    budget = Policy(keep_last=5, keep_best=(KeepBest("val_loss", 1),), max_bytes=int(3.5 * GB))
    budget = replace(budget, keep_local=local)
    actions = {d.id: d.action for d in plan(items, budget).decisions}
    # 5 GB kept: #1 demoted (-0.5), #4 tiered (#2 best stays local, #3 cannot tier): 3.5 GB.
    assert actions == {1: "demote", 2: "keep", 3: "keep", 4: "tier", 5: "keep"}
    actions = {d.id: d.action for d in plan(items, replace(budget, max_bytes=2 * GB)).decisions}
    assert actions == {1: "trash", 2: "keep", 3: "trash", 4: "tier", 5: "keep"}

    aged = Policy(keep_last=5, keep_best=(KeepBest("val_loss", 1),), tier_after=3600.0)
    decided = {d.id: d for d in plan(items, replace(aged, keep_local=local), at(4)).decisions}
    assert {i: d.action for i, d in decided.items()} == {
        1: "tier",
        2: "keep",
        3: "keep",
        4: "keep",  # written less than 1h before now
        5: "keep",
    }
    assert decided[1].reasons == ("older than tier_after 1h: tiered to the object store", "last #5")
    assert "stays local (keep_local best val_loss #1)" in decided[2].reasons
    assert "not tiered: format x" in decided[3].reasons
    assert plan(items, aged).decisions == plan(items, replace(aged, tier_after=None)).decisions


# ---- remote retention: checkpoints whose bytes are only in the object store ----------------------


def remote(id: int, mtime: float, **fields: Any) -> Item:
    return item(id, mtime, where="remote", tier_blocked=None, **fields)


def test_remote_ones_take_keep_last_slots_and_those_dropped_trash_their_remote_copy() -> None:
    items = [remote(1, at(1)), remote(2, at(2)), remote(3, at(3)), item(4, at(4))]
    assert table(plan(items, Policy(keep_last=3))) == [
        (1, "trash-remote", ("matched no keep rule", "its remote copy to the store's trash")),
        (2, "keep", ("last #3", "in the object store")),
        (3, "keep", ("last #2", "in the object store")),
        (4, "keep", ("newest", "last #1")),
    ]


def test_the_budget_is_the_local_disks_remote_bytes_cost_it_nothing() -> None:
    items = [remote(1, at(1), size_bytes=100 * GB), item(2, at(2)), item(3, at(3))]
    decided = {d.id: d for d in plan(items, Policy(keep_last=3, max_bytes=2 * GB)).decisions}
    assert [decided[i].action for i in (1, 2, 3)] == ["keep", "keep", "keep"]
    # Over the local budget by one local file: the older local one goes, never the remote one.
    tight = {d.id: d for d in plan(items, Policy(keep_last=3, max_bytes=GB)).decisions}
    assert tight[1].action == "keep" and tight[2].action == "trash" and tight[3].action == "keep"


def test_the_newest_local_one_is_protected_when_the_newest_is_remote() -> None:
    items = [item(1, at(1)), item(2, at(2)), remote(3, at(3))]
    decided = {d.id: d for d in plan(items, Policy(keep_last=1)).decisions}
    assert decided[3].action == "keep"
    assert decided[2].action == "keep" and "newest local" in decided[2].reasons
    assert decided[1].action == "trash"


def test_a_pinned_or_best_remote_one_keeps_its_remote_copy() -> None:
    vl = {1: 0.1, 2: 0.9, 3: 0.8, 4: 0.7, 5: 0.6}
    items = [
        remote(i, at(i), metrics={"val_loss": vl[i]}, pinned=(i == 2)) for i in range(1, 5)
    ] + [item(5, at(5), metrics={"val_loss": vl[5]})]
    decided = {
        d.id: d
        for d in plan(items, Policy(keep_last=1, keep_best=(KeepBest("val_loss", 1),))).decisions
    }
    assert decided[1].action == "keep" and "in the object store" in decided[1].reasons
    assert decided[2].action == "keep"
    assert decided[3].action == "trash-remote" and decided[4].action == "trash-remote"
    assert plan(items, Policy(keep_last=1)).bytes_freed == 0  # a remote copy frees no local disk


# ---- issue 39: retention counts training moments, never what a trainer resumes from -----------


def test_a_copy_is_never_newest_nor_a_training_moment() -> None:
    """A kept copy with no epoch sorted after every dated checkpoint: `keep_last 1` kept it as
    "newest; last #1" and trashed the real newest epoch. Copies are planned apart."""
    items = [item(1, at(1), epoch=1), item(2, at(2), epoch=2), item(3, at(3), copy=True)]
    assert table(plan(items, Policy(keep_last=1))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("newest", "last #1")),
        (3, "trash", ("matched no keep rule",)),  # the versions' own policy keeps copies
    ]


def test_an_unknown_epoch_is_placed_by_its_save_time_never_newest() -> None:
    items = [item(1, at(1), epoch=1), item(2, at(2)), item(3, at(3), epoch=2)]
    result = table(plan(items, Policy(keep_last=1)))
    assert result == [
        (1, "trash", ("matched no keep rule",)),
        (2, "trash", ("matched no keep rule",)),  # saved between epochs 1 and 2
        (3, "keep", ("newest", "last #1")),
    ]
    late = [item(1, at(1), epoch=1), item(2, at(2), epoch=2), item(3, at(3))]
    assert table(plan(late, Policy(keep_last=1))) == [
        (1, "trash", ("matched no keep rule",)),
        (2, "keep", ("newest", "last #1")),
        (3, "keep", ("newest mtime",)),  # the last save, whatever it is: kept, not "newest"
    ]


def test_the_newest_resumable_and_the_trainers_own_files_are_never_trashed() -> None:
    """HF: checkpoint-64 (resumable) beside a later weights-only export; a plain loop's
    `last.pt`/`best.pt`: kept whatever the rules say, with the reason."""
    last = "the trainer's last file (last.pt: it rewrites it at every save)"
    items = [
        item(1, at(1), epoch=1, resumable=True, trainer_file=last),
        item(2, at(2), epoch=2, resumable=True),
        item(3, at(3), epoch=3),  # weights only: not resumable
    ]
    assert table(plan(items, Policy(keep_last=1))) == [
        (1, "keep", (last,)),
        (2, "keep", ("newest resumable",)),
        (3, "keep", ("newest", "last #1")),
    ]


def test_every_file_of_the_newest_moment_is_kept_and_ties_keep_the_file_no_trainer_rewrites() -> (
    None
):
    """On a tie keep_best keeps the epoch file, not the trainer's rewritable `best.pt` (kept
    anyway, as the trainer's own): a resumed Keras ModelCheckpoint overwrites `best.keras` with
    a worse model (keras#17012), which left the best in a kept copy alone (the harness's I5)."""
    best = "the trainer's best file (best.pt: it rewrites it with each better model)"
    items = [
        item(1, at(1), epoch=1, metrics={"val_loss": 0.5}),  # ckpt_epoch001.pt
        item(2, at(1), epoch=1, metrics={"val_loss": 0.5}, trainer_file=best),  # same tick
        item(3, at(2), epoch=2, metrics={"val_loss": 0.7}),
        item(4, at(2), epoch=2, metrics={"val_loss": 0.7}),
    ]
    result = table(plan(items, Policy(keep_best=(KeepBest("val_loss", 1),))))
    moment = "newest training moment (epoch 2: 2 files)"
    assert result == [
        (1, "keep", ("best val_loss #1 (0.5)",)),
        (2, "keep", (best,)),
        (3, "keep", (moment,)),
        (4, "keep", ("newest",)),
    ]


def test_a_second_file_of_a_kept_best_goes_saying_so() -> None:
    """Two files no trainer rewrites, one moment, one value: one is the best, the other goes
    with a true reason (never "matched no keep rule" of the best)."""
    items = [
        item(1, at(1), epoch=1, metrics={"val_loss": 0.5}),
        item(2, at(1), epoch=1, metrics={"val_loss": 0.5}),
        item(3, at(2), epoch=2, metrics={"val_loss": 0.7}),
    ]
    result = table(plan(items, Policy(keep_best=(KeepBest("val_loss", 1),))))
    assert result[:2] == [
        (1, "trash", ("the same moment and val_loss as ckpt-2.h5, kept as the best",)),
        (2, "keep", ("best val_loss #1 (0.5)",)),
    ]
