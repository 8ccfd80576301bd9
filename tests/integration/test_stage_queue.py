"""Issue 43 item 2: the pipeline's durable queue in the catalog, on SQLite and PostgreSQL.

A job per (checkpoint generation, stage) is made once, however many daemons make it; one
claimer at a time holds it, under a lease with a fencing token; a job whose holder stopped
renewing is taken over only once the lease expired; a result is recorded only by the holder of
the job's current token (a daemon that lost its job can never record a second result); a job
whose checkpoint went or was rewritten is cancelled; a stage's metrics join the checkpoint's
(source `stage:<name>`) and survive the derivation that rewrites the logged ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.core.model import CheckpointStatus, FileStat, IndexRecord
from tests.support.catalogs import sql


@pytest.fixture
def store(catalog_url: str) -> Iterator[Store]:
    opened = Store(catalog_url)
    yield opened
    opened.close()


def add(store: Store, name: str, digest: str) -> int:
    return store.index.record(
        IndexRecord(
            path=f"/r/run/{name}",
            root="/r",
            run="run",
            status=CheckpointStatus.OK,
            reason=None,
            stat=FileStat(10, 1, 1),
            hash=digest,
        ),
        actor_name="test",
        at="2026-01-01T00:00:00.000Z",
    )


def test_a_job_is_made_once_and_claimed_by_one(store: Store, catalog_url: str) -> None:
    ckpt = add(store, "a.pt", "h1")
    queue = store.stage_jobs
    assert queue.without_jobs(["eval"]) == [ckpt]
    assert queue.make([(ckpt, "h1", "eval")]) == 1
    assert queue.make([(ckpt, "h1", "eval")]) == 0  # a second maker (another daemon) adds none
    assert queue.without_jobs(["eval"]) == []
    # Two claimers at once (threads with their own connections): the job goes to one of them.
    others = [Store(catalog_url) for _ in range(4)]
    taken: list[list[object]] = []
    start = threading.Barrier(len(others))

    def claim(s: Store, i: int) -> None:
        start.wait()
        taken.append(list(s.stage_jobs.claim(["eval"], f"daemon{i}", 60)))

    threads = [threading.Thread(target=claim, args=(s, i)) for i, s in enumerate(others)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in others:
        s.close()
    winners = [jobs for jobs in taken if jobs]
    assert len(winners) == 1 and len(winners[0]) == 1, taken
    (job,) = queue.list()
    assert (job.state, job.attempts, job.token) == ("running", 1, 1)


def test_an_expired_lease_is_taken_over_and_the_old_holder_records_nothing(
    store: Store, catalog_url: str
) -> None:
    ckpt = add(store, "a.pt", "h1")
    queue = store.stage_jobs
    queue.make([(ckpt, "h1", "eval")])
    (first,) = queue.claim(["eval"], "a", 60)
    assert queue.claim(["eval"], "b", 60) == []  # live lease: nobody else takes it
    # The holder stopped renewing (stopped, or killed): its lease lapses.
    sql(catalog_url, "UPDATE stage_jobs SET expires_at = '2000-01-01T00:00:00.000Z'")
    (second,) = queue.claim(["eval"], "b", 60)
    assert second.token == first.token + 1 and second.attempts == 2
    assert not queue.renew(first, 60)  # the old holder learns it lost the job
    late = queue.finish(first, state="done", error=None, output="late", result={"metrics": {}})
    assert late is False
    assert queue.finish(
        second, state="done", error=None, output="x", result={}, metrics_by_name={"eval:acc": 0.9}
    )
    (job,) = queue.list()
    assert (job.state, job.output) == ("done", "x")
    assert sql(catalog_url, "SELECT name, value, source FROM metrics") == [
        ("eval:acc", 0.9, "stage:eval")
    ]


def test_a_failed_attempt_waits_its_backoff_then_runs_again(store: Store) -> None:
    ckpt = add(store, "a.pt", "h1")
    queue = store.stage_jobs
    queue.make([(ckpt, "h1", "eval")])
    (job,) = queue.claim(["eval"], "a", 60)
    queue.finish(job, state="failed", error="exit 1", output="", result=None, retry_in=2)
    assert queue.claim(["eval"], "a", 60) == []  # not before its backoff
    deadline = time.monotonic() + 30
    again: list[object] = []
    while not again and time.monotonic() < deadline:
        time.sleep(0.2)
        again = list(queue.claim(["eval"], "a", 60))
    assert again, "the job never became runnable again"


def test_every_move_of_a_job_changes_the_queue_s_signature(store: Store) -> None:
    """What the web view polls: a page showing a job is drawn again when the job moves."""
    ckpt = add(store, "a.pt", "h1")
    queue = store.stage_jobs
    seen = [queue.signature()]
    queue.make([(ckpt, "h1", "eval")])
    seen.append(queue.signature())
    (job,) = queue.claim(["eval"], "a", 60)
    seen.append(queue.signature())
    queue.finish(job, state="failed", error="exit 1", output="", result=None)
    seen.append(queue.signature())
    queue.set_state(job.id, "pending", only_from=("failed",), why="retried by hand")
    seen.append(queue.signature())
    assert len(set(seen)) == len(seen), seen
    assert queue.list(checkpoint_ids=[ckpt])[0].id == job.id
    assert queue.list(checkpoint_ids=[ckpt + 1]) == []


def test_jobs_of_a_gone_or_rewritten_checkpoint_are_cancelled(store: Store) -> None:
    a, b = add(store, "a.pt", "h1"), add(store, "b.pt", "h2")
    queue = store.stage_jobs
    queue.make([(a, "h1", "eval"), (b, "h2", "eval")])
    store.index.mark([a], CheckpointStatus.MISSING, "deleted", actor_name="test")
    assert queue.cancel_gone() == 1
    states = {j.checkpoint_id: (j.state, j.error) for j in queue.list()}
    assert states[a] == ("cancelled", "its checkpoint is gone or was rewritten")
    assert states[b][0] == "pending"


def test_stage_metrics_survive_derivation(store: Store, catalog_url: str) -> None:
    """The logged metrics are derived again and again; a stage's results are not theirs."""
    from ckpt_daemon.catalog.store_runs import replace_metrics
    from ckpt_daemon.core.model import MetricValue

    ckpt = add(store, "a.pt", "h1")
    queue = store.stage_jobs
    queue.make([(ckpt, "h1", "eval")])
    (job,) = queue.claim(["eval"], "a", 60)
    queue.finish(
        job, state="done", error=None, output="", result={}, metrics_by_name={"eval:acc": 0.5}
    )
    from sqlalchemy import create_engine

    engine = create_engine(catalog_url)
    with engine.begin() as conn:
        replace_metrics(
            conn, ckpt, [MetricValue("val_loss", 0.3, "csv"), MetricValue("eval:acc", 9.0, "csv")]
        )
    engine.dispose()
    rows = sorted(sql(catalog_url, "SELECT name, value, source FROM metrics"))
    assert rows == [("eval:acc", 0.5, "stage:eval"), ("val_loss", 0.3, "csv")]


def test_jobs_are_made_due_skipped_or_waiting_for_what_they_need(store: Store) -> None:
    """`make_jobs`: a stage not due is recorded `skipped` with why (decided once), a stage
    whose need is open waits, and one whose need failed is cancelled with why."""
    from ckpt_daemon.core.pipeline import Stage, Trigger
    from ckpt_daemon.usecases.pipeline import make_jobs

    a = add(store, "a.pt", "h1")
    eval_stage = Stage("eval", Trigger("complete"), command=("x",))
    export = Stage("export", Trigger("complete"), uses="split", needs=("eval",))
    only_sweeps = Stage("sweep", Trigger("complete"), runs="sweep*", command=("x",))
    stages = [eval_stage, export, only_sweeps]
    waiting: dict[int, str] = {}
    # eval pending, sweep skipped; export waits
    assert make_jobs(store.reads, store.stage_jobs, stages, waiting) == 2
    assert waiting == {a: "h1"}
    # looked at again only once dropped
    assert make_jobs(store.reads, store.stage_jobs, stages, waiting) == 0
    by_stage = {j.stage: (j.state, j.error) for j in store.stage_jobs.list()}
    assert by_stage == {
        "eval": ("pending", None),
        "sweep": ("skipped", "run run does not match sweep*"),
    }
    (job,) = store.stage_jobs.claim(["eval"], "a", 60)
    store.stage_jobs.finish(job, state="failed", error="exit 1", output="", result=None)
    waiting.clear()
    assert make_jobs(store.reads, store.stage_jobs, stages, waiting) == 1
    by_stage = {j.stage: (j.state, j.error) for j in store.stage_jobs.list()}
    assert by_stage["export"] == ("cancelled", "needs eval, which is failed")
