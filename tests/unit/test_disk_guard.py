"""The disk guard's pure plan (core.disk_guard): the documented order, each step's reason, what
is never touched, "cannot free enough" with what holds the space; and `min_free` in the config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core import disk_guard
from ckpt_daemon.core.disk_guard import MinFree, RunFacts, TrashEntry
from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.core.retention import Item
from ckpt_daemon.settings import config as config_module

MB = 1_000_000


def item(i: int, size: int = 10 * MB, **kw: object) -> Item:
    fields: dict = {"status": "ok", "mtime": 1000.0 + i, "epoch": i}
    fields.update(kw)
    return Item(id=i, path=f"/r/run/ckpt-{i:02d}.keras", size_bytes=size, **fields)


def run(*items: Item, best: tuple = (("val_loss", "min"),), resumable: int | None = None):
    return RunFacts("run", tuple(items), best, resumable)


def acts(plan: disk_guard.GuardPlan) -> list[tuple[str, int]]:
    return [(s.action, s.id) for s in plan.steps]


TABLE = [
    # (name, free, threshold, runs, trash, expected steps, enough)
    ("above: nothing", 50 * MB, 40 * MB, [run(item(1), item(2))], [], [], True),
    (
        "trash first, oldest trashed first, and only as much as needed",
        10 * MB,
        20 * MB,
        [run(item(1), item(2))],
        [TrashEntry(8, "/r/b", 6 * MB, "2026-01-02"), TrashEntry(9, "/r/a", 6 * MB, "2026-01-01")],
        [("purge", 9), ("purge", 8)],
        True,
    ),
    (
        "a pinned trashed one is never purged",
        10 * MB,
        12 * MB,
        [run(item(1), item(2))],
        [TrashEntry(9, "/r/a", 6 * MB, "2026-01-01", pinned=True)],
        [("trash", 1)],
        True,
    ),
    (
        "demotion before trashing, oldest first",
        10 * MB,
        25 * MB,
        [run(item(1, inference_bytes=3 * MB), item(2, inference_bytes=3 * MB), item(3))],
        [],
        [("demote", 1), ("demote", 2)],  # the newest (3) is never touched: not enough
        False,
    ),
    (
        "every demotion comes before the first trashing",
        10 * MB,
        25 * MB,
        [run(item(1), item(2, inference_bytes=3 * MB), item(3))],
        [],
        [("demote", 2), ("trash", 1)],
        True,
    ),
    (
        "a demotion whose artifact does not fit in what is free is skipped",
        2 * MB,
        8 * MB,
        [run(item(1, inference_bytes=3 * MB), item(2), item(3))],
        [],
        [("trash", 1)],
        True,
    ),
    (
        "then the oldest unprotected; newest, pinned, not ok, best and resumable kept",
        1 * MB,
        100 * MB,
        [
            run(
                item(1, metrics={"val_loss": 0.1}),  # best val_loss
                item(2, pinned=True),
                item(3, status="incomplete"),
                item(4),
                item(5, protected="previous generation of best.keras (v1)"),
                item(6),  # last resumable
                item(7),  # newest
                resumable=6,
            )
        ],
        [],
        [("trash", 4)],
        False,
    ),
]


@pytest.mark.parametrize(
    ("free", "threshold", "runs", "trash", "expected", "enough"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_plan_table(free, threshold, runs, trash, expected, enough) -> None:
    plan = disk_guard.plan(free, threshold, runs, trash)
    assert acts(plan) == expected
    assert plan.enough is enough
    assert all(step.reason.startswith("disk pressure (free ") for step in plan.steps)


def test_what_no_retention_rule_keeps_goes_before_what_a_rule_keeps() -> None:
    facts = RunFacts("run", (item(1), item(2), item(3)), (), None, {1: "last #2", 3: "newest"})
    plan = disk_guard.plan(1 * MB, 21 * MB, [facts])
    assert acts(plan) == [("trash", 2), ("trash", 1)]
    assert "(no retention rule keeps it)" in plan.steps[0].reason
    assert "(kept only by last #2)" in plan.steps[1].reason


def test_demotion_reason_and_what_it_frees() -> None:
    plan = disk_guard.plan(10 * MB, 16 * MB, [run(item(1, inference_bytes=3 * MB), item(2))])
    (step,) = plan.steps
    assert (step.action, step.frees) == ("demote", 7 * MB)
    assert "inference artifact" in step.reason and "min_free 16.0 MB" in step.reason
    assert plan.free_after == 17 * MB


def test_cannot_free_enough_says_what_holds_the_space() -> None:
    plan = disk_guard.plan(
        1 * MB,
        500 * MB,
        [run(item(1, 30 * MB, pinned=True), item(2, 20 * MB))],
        [TrashEntry(9, "/r/x", 4 * MB, "2026-01-01", pinned=True)],
        other_bytes=123 * MB,
    )
    assert not plan.enough and plan.steps == ()
    text = plan.explain()
    assert "cannot free enough" in text
    assert "2 protected checkpoints hold 50.0 MB" in text
    assert "ckpt-01.keras (30.0 MB: pinned)" in text
    assert "ckpt-02.keras (20.0 MB: newest" in text
    assert "pinned checkpoints in the trash hold 4.0 MB" in text
    assert "not in the catalog: 123.0 MB" in text


def test_protections_name_every_reason() -> None:
    facts = run(
        item(1, metrics={"val_loss": 0.5}),
        item(2, metrics={"val_loss": 0.2}),
        item(3, metrics={"val_loss": 0.9}, pinned=True),
        resumable=1,
    )
    found = disk_guard.protections(facts)
    assert found == {3: "newest, pinned", 2: "best val_loss", 1: "last resumable"}


def test_best_metrics_default_and_rules() -> None:
    from ckpt_daemon.core.retention import KeepBest

    assert disk_guard.best_metrics((), {"loss", "val_loss"}) == (("val_loss", "min"),)
    assert disk_guard.best_metrics((), {"loss"}) == ()
    rules = (KeepBest("val_accuracy", 2),)
    assert disk_guard.best_metrics(rules, {"val_loss"}) == (("val_accuracy", "max"),)


def test_min_free_threshold() -> None:
    assert MinFree(percent=10).threshold(1000) == 100
    assert MinFree(percent=0.5).threshold(999) == 5  # rounded up: never below what was asked
    assert MinFree(bytes=20 * MB).threshold(1) == 20 * MB
    assert MinFree(percent=10).describe() == "10%" and MinFree(bytes=MB).describe() == "1.0 MB"


def _parse(text: str) -> config_module.Config:
    return config_module.parse(text, base=Path("/"), source="test")


def test_min_free_config() -> None:
    c = _parse("roots: [{path: /d/a, min_free: 10%}, /d/b]\nmin_free: 20GB\n")
    assert c.min_free_for(c.roots[0]) == MinFree(percent=10.0)
    assert c.min_free_for(c.roots[1]) == MinFree(bytes=20 * 10**9)
    assert _parse("roots: [/d/a]\n").min_free_for(_parse("roots: [/d/a]\n").roots[0]) is None


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("min_free: 0%", "min_free"),
        ("min_free: 100%", "min_free"),
        ("min_free: ten%", "min_free"),
        ("min_free: lots", "min_free"),
        ("min_free: 0", "min_free"),
        ("min_free: -5GB", "min_free"),
    ],
)
def test_min_free_refused_with_its_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse("roots: [/d/a]\n" + text + "\n")
    assert caught.value.exit_code == 2 and str(caught.value).startswith(f"config: {key}:")
    with pytest.raises(ConfigError, match=r"roots\[0\]\.min_free"):
        _parse("roots: [{path: /d/a, " + text + "}]\n")


_items = st.builds(
    lambda i, size, inf, status, pinned, loss, prot, mtime: item(
        i,
        size,
        inference_bytes=inf,
        status=status,
        pinned=pinned,
        metrics={} if loss is None else {"val_loss": loss},
        protected="previous generation" if prot else None,
        mtime=mtime,
    ),
    st.integers(0, 10**6),
    st.integers(0, 50 * MB),
    st.none() | st.integers(0, 50 * MB),
    st.sampled_from(["ok", "ok", "ok", "incomplete", "corrupt", "unreadable"]),
    st.booleans(),
    st.none() | st.floats(0, 10) | st.just(float("nan")),
    st.booleans(),
    st.floats(0, 10**6),
)


@settings(max_examples=80, deadline=None)
@given(
    runs=st.lists(
        st.tuples(
            st.lists(_items, max_size=8, unique_by=lambda i: i.id),
            st.booleans(),
        ),
        max_size=4,
    ),
    free=st.integers(0, 100 * MB),
    threshold=st.integers(0, 400 * MB),
)
def test_property_a_protected_checkpoint_is_never_in_any_plan(runs, free, threshold) -> None:
    facts, seen = [], set()
    for n, (items, resumable) in enumerate(runs):
        items = [i for i in items if i.id not in seen]
        seen.update(i.id for i in items)
        last = max((i.id for i in items), default=None) if resumable else None
        facts.append(RunFacts(f"run{n}", tuple(items), (("val_loss", "min"),), last))
    plan = disk_guard.plan(free, threshold, facts)
    touched = {s.id for s in plan.steps}
    for run_facts in facts:
        protected = disk_guard.protections(run_facts)
        ok = [i for i in run_facts.items if i.status == "ok"]
        assert not touched & set(protected)
        for i in run_facts.items:
            if i.pinned or i.status != "ok" or i.protected or i.id == run_facts.last_resumable:
                assert i.id not in touched
        if ok:  # every run keeps at least its newest ok checkpoint
            assert {i.id for i in ok} - touched
    # It stops once enough is freed: without its last step it would not have been enough.
    if plan.steps:
        assert plan.free_after - plan.steps[-1].frees < threshold
    assert plan.enough == (plan.free_after >= threshold)


def test_tiering_comes_before_trashing_one_without_a_remote_copy() -> None:
    """With a reachable store, what the guard would trash and can tier is tiered first (its
    bytes stay, in the store); what cannot tier is trashed only after."""
    runs = [
        run(
            item(1, tier_blocked="format x"),
            item(2, tier_blocked=None, inference_bytes=3 * MB),
            item(3, inference_bytes=3 * MB),
            item(4),
        )
    ]
    plan = disk_guard.plan(10 * MB, 30 * MB, runs)
    assert acts(plan) == [("tier", 2), ("demote", 3), ("trash", 1)]
    assert "tiered to the object store" in plan.steps[0].reason
    assert "1 demote, 1 tier, 1 trash" in plan.explain()


# ---- issue 39: our own bytes first, whole ----


def copy(i: int, of: str = "last.pt", size: int = 10 * MB, **kw: object) -> Item:
    """A kept version of `of` (a copy of ours in `.ckpt-versions/`)."""
    fields: dict = {"status": "ok", "mtime": 1000.0 + i, "epoch": None}
    fields.update(kw)
    return Item(id=i, path=f"/r/.ckpt-versions/run/{of}.v{i}", size_bytes=size, **fields)


def test_our_bytes_go_first_in_the_documented_order() -> None:
    """Leftover temps, kept copies (in the trash, nothing keeps them, previous generations,
    standby last), spare artifacts, the rest of the trash; only then the user's checkpoints."""
    runs = [
        run(
            item(1, inference_bytes=3 * MB),
            item(2, inference_bytes=3 * MB),
            item(3),
            copy(50, protected="previous generation of last.pt (v50)", mtime=900.0),
            copy(51, mtime=1500.0),
            copy(52, of="best.pt", status="standby", mtime=800.0),
            copy(53, mtime=700.0),
        )
    ]
    trash = [
        TrashEntry(60, "/r/.ckpt-trash/b/ckpt-00.keras", 1 * MB, "2026-01-01"),
        TrashEntry(61, "/r/.ckpt-trash/b/.ckpt-versions/run/last.pt.v9", 1 * MB, "2026-01-02"),
    ]
    ours = [
        disk_guard.OwnFile("artifact", 2, "/r/run/ckpt-02.inference.keras", 1 * MB),
        disk_guard.OwnFile("temp", 0, "/r/run/.ckpt-tmp-1h2-x", 1 * MB),
    ]
    plan = disk_guard.plan(0, 1000 * MB, runs, trash, ours=ours)
    assert acts(plan) == [
        ("remove", 0),  # our leftover temp
        ("purge", 61),  # a kept copy in the trash
        ("trash", 53),  # copies nothing keeps, oldest first
        ("trash", 51),
        ("trash", 50),  # then the previous generation
        ("trash", 52),  # then the standby copy (what its file holds now)
        ("remove", 2),  # a spare artifact
        ("purge", 60),  # the rest of the trash
        ("demote", 1),  # only now the user's checkpoints, by the ladder
        ("demote", 2),
    ]
    copies = [s for s in plan.steps if s.id in (50, 51, 52, 53)]
    assert all("a kept copy of ours (.ckpt-versions)" in s.reason for s in copies)
    assert "standby: what its file holds now" in copies[-1].reason


def test_a_copy_is_never_demoted_tiered_nor_the_newest() -> None:
    """A version with no epoch and the latest mtime was "newest", so the run's real newest went;
    and each version was demoted (every version of best.pt then claimed one artifact's name)."""
    runs = [run(item(1), item(2), copy(9, mtime=5000.0, inference_bytes=1 * MB, tier_blocked=None))]
    plan = disk_guard.plan(0, 15 * MB, runs)
    assert acts(plan) == [("trash", 9), ("trash", 1)]
    assert 2 in plan.protected and "newest" in plan.protected[2]
    assert 9 not in plan.protected


def test_the_only_copy_of_the_best_is_kept() -> None:
    """keras#17012: best.pt rewritten with a worse model; its kept copy holds the best."""
    better = copy(9, of="best.pt", metrics={"val_loss": 0.1})
    worse = copy(8, of="best.pt", metrics={"val_loss": 0.5})
    runs = [
        run(item(1, metrics={"val_loss": 0.3}), item(2, metrics={"val_loss": 0.4}), better, worse)
    ]
    plan = disk_guard.plan(0, 1000 * MB, runs)
    assert plan.protected[9] == "best val_loss (only this kept copy holds it)"
    assert ("trash", 8) in acts(plan) and ("trash", 9) not in acts(plan)
    # As good as a file at its path: the copy is only a copy.
    same = copy(9, of="best.pt", metrics={"val_loss": 0.3})
    plan = disk_guard.plan(0, 1000 * MB, [run(item(1, metrics={"val_loss": 0.3}), item(2), same)])
    assert acts(plan)[0] == ("trash", 9)


def test_every_copy_leaves_min_free_or_the_reserve() -> None:
    from ckpt_daemon.core import space_reserve

    assert space_reserve.room_to_keep(2 * MB, 12 * MB) == (12 * MB, "min_free 12.0 MB")
    assert space_reserve.room_to_keep(2 * MB, 12 * MB, "30%") == (12 * MB, "min_free 12.0 MB (30%)")
    assert space_reserve.room_to_keep(20 * MB, 12 * MB) == (20 * MB, "")
    assert space_reserve.room_to_keep(20 * MB, None) == (20 * MB, "")
    why = space_reserve.capture_refusal(12_500_000, 900_000, 12 * MB, "min_free 12.0 MB")
    assert why == "free 12.5 MB < the copy 900.0 kB + min_free 12.0 MB"
    assert space_reserve.capture_refusal(13 * MB, 900_000, 12 * MB, "min_free 12.0 MB") is None


def test_every_file_of_the_newest_training_moment_is_kept() -> None:
    """`ckpt_epoch007.pt`, `last.pt` and `best.pt` all saved at epoch 7: the last written of
    them was the only "newest", and the guard demoted the epoch file under pressure."""
    epoch7 = [
        item(7, epoch=7, inference_bytes=3 * MB),
        Item(id=8, path="/r/run/last.pt", status="ok", mtime=1008.0, size_bytes=10 * MB, epoch=7),
        Item(id=9, path="/r/run/best.pt", status="ok", mtime=1009.0, size_bytes=10 * MB, epoch=7),
    ]
    plan = disk_guard.plan(5 * MB, 1000 * MB, [run(item(6, inference_bytes=3 * MB), *epoch7)])
    assert acts(plan) == [("demote", 6)]
    assert plan.protected[7].startswith("newest training moment"), plan.protected[7]


def test_a_checkpoint_a_stage_waits_on_goes_last_and_its_stages_are_named() -> None:
    """Issue 43: freeing a checkpoint whose evaluation is pending gives that evaluation up. The
    guard takes the others of its step first, and a step that must take one says which stages
    it gives up (the caller cancels those jobs)."""
    facts = RunFacts(
        "run",
        (item(1), item(2), item(3), item(4)),
        (),
        None,
        pending={1: ("eval", "export"), 2: ("eval",)},
    )
    plan = disk_guard.plan(10 * MB, 25 * MB, [facts])
    assert acts(plan) == [("trash", 3), ("trash", 1)]  # 4 is the newest; 3 has no stage waiting
    assert plan.steps[0].gives_up == ()
    assert plan.steps[1].gives_up == ("eval", "export")
    assert plan.steps[1].reason.endswith("; gives up its pending stages eval, export")
    assert "gives up the pending stages of 1 checkpoint(s)" in plan.explain()


def test_the_guard_keep_best_and_keep_local_protect_the_same_of_tied_twins() -> None:
    """A plain PyTorch loop saves `best.pt` (rewritten by its trainer) and `ckpt_epoch03.pt` at
    the same moment with the same val_loss. Retention keeps the epoch file as the best (a
    resumed trainer overwrites `best.pt` with a worse model, keras#17012); the guard and
    keep_local must pick that same file, or under disk pressure the guard frees the only
    checkpoint of the best that no trainer rewrites."""
    from ckpt_daemon.core import retention
    from ckpt_daemon.core.tier_plan import KeepLocal, stays_local

    losses = {1: 0.9, 2: 0.7, 3: 0.5, 4: 0.6, 5: 0.8}
    items = [item(e, metrics={"val_loss": v}, mtime=1000.0 + 10 * e) for e, v in losses.items()]
    twin = item(9, metrics={"val_loss": 0.5}, epoch=3, mtime=1030.5, trainer_file="best.pt")
    items = sorted([*items, replace(twin, path="/r/run/best.pt")], key=lambda i: i.mtime)

    guarded = disk_guard.protections(run(*items))
    assert "best val_loss" in guarded[3]
    assert "best val_loss" not in guarded.get(9, "")

    policy = retention.Policy(keep_last=1, keep_best=(retention.KeepBest("val_loss", 1, "min"),))
    kept = {d.id: d.reasons for d in retention.plan(items, policy).decisions}
    assert any(r.startswith("best val_loss #1") for r in kept[3])
    assert not any(r.startswith("best val_loss #1") for r in kept[9])

    local = stays_local(items, items, {}, KeepLocal(best=1), [("val_loss", "min")])
    assert local == {3: "keep_local best val_loss #1"}
