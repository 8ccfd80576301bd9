"""Issue 12, items 2 and 5, on a live `ckpt serve`: a scripted scenario (index real Keras
checkpoints one by one, a corrupt file, a retention job that trashes two, a compress), then
`/metrics` scraped over HTTP and parsed with Prometheus's own parser, every value checked
exactly; `ckpt metrics --textfile` gives the same text; the hooks got their JSON documents."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import Daemon, service_workspace
from tests.support.pausing import stop_between_transactions
from tests.support.workspace import ZIP_FILES, ZIP_RUN, Workspace

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
# e02 first (a new best), e01 (worse: no hook), e03 (the new best).
NEW = "new_best"
ORDER = [ZIP_FILES[1], ZIP_FILES[0], ZIP_FILES[2]]


def hook_config(out: Path) -> str:
    writer = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    return (
        "  metrics_listen: 127.0.0.1:0\n"
        "hooks:\n"
        f"  - on: [new_best, corrupt, retention]\n"
        f"    command: {json.dumps([sys.executable, '-c', writer])}\n"
        "    timeout: 60s\n"
    )


def scrape(port: int) -> tuple[str, Samples]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return text, parse(text)


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("metrics")
    hooks_out = base / "hooks.jsonl"
    ws = service_workspace(base)
    # service_workspace ends with `schedule:` (rescan off); `service:` is ours to extend.
    ws.config.write_text(
        ws.config.read_text().replace("service:\n  heartbeat: 1s\n", "")
        + "service:\n  heartbeat: 1s\n"
        + hook_config(hooks_out)
    )
    started = time.time()
    daemon = Daemon(ws)
    try:
        daemon.wait_for_log("event=ready")
        port = int(re.search(r"metrics_listening address=127\.0\.0\.1:(\d+)", daemon.log)[1])
        run = ws.root / ZIP_RUN
        run.mkdir(parents=True)
        for i, name in enumerate(ORDER, start=1):  # one at a time: "new best" has an order
            shutil.copyfile(keras_checkpoints / ZIP_RUN / name, run / name)  # mtime: now
            daemon.wait_until(
                lambda i=i: value(scrape(port)[1], "ckpt_indexed_total") == i, 60, f"{i} indexed"
            )
        legacy = ws.root / "legacy"
        legacy.mkdir()
        padded = base / "full.h5"
        shutil.copyfile(keras_checkpoints / "k3/legacy/full.h5", padded)
        with h5py.File(padded, "a") as f:  # compressible: the fixture alone would not shrink
            f.create_dataset("padding", data=np.zeros(65536, np.float32))
        shutil.copyfile(padded, legacy / "full.h5")
        good = (keras_checkpoints / ZIP_RUN / ZIP_FILES[0]).read_bytes()
        (legacy / "cut.keras").write_bytes(good[:5000])  # a cut archive: corrupt once settled
        for what, condition in (
            ("the cut archive marked corrupt", ("ckpt_checkpoints", {"status": "corrupt"}, 1)),
            ("full.h5 indexed", ("ckpt_indexed_total", {}, 4)),
            # The worker keeps the copy of generation 1 after it recorded it: the compress
            # below must rewrite a generation already kept (else the copy is of its new bytes).
            ("generation 1 of full.h5 kept", ("ckpt_checkpoints", {"status": "standby"}, 1)),
        ):
            name, labels, expected = condition
            daemon.wait_until(
                lambda n=name, lb=labels, e=expected: value(scrape(port)[1], n, **lb) == e,
                60,
                what,
            )
        # Paused while the compress swaps the file and records its new bytes, so the worker
        # never reads the file in between (it would index the new bytes itself: a 5th event).
        # Stopped between its transactions: stopped holding SQLite's write lock (a heartbeat
        # each second), it would block the compress's writes (tests/support/pausing.py).
        stop_between_transactions(daemon.proc.pid, f"sqlite:///{ws.base / 'state' / 'catalog.db'}")
        try:
            compressed = ws.json("compress", str(legacy / "full.h5"))
        finally:
            daemon.signal(signal.SIGCONT)
        assert compressed["codec"].startswith("gzip"), compressed
        # The retention job (keep_last 1 for the zip run) trashes two: turned on by a reload.
        ws.config.write_text(
            ws.config.read_text().replace(
                "schedule:\n  rescan: 0\n", "schedule:\n  rescan: 0\n  retention: 1s\n"
            )
            + f"runs:\n  - match: {json.dumps(ZIP_RUN)}\n    retention: {{keep_last: 1}}\n"
        )
        daemon.signal(signal.SIGHUP)
        daemon.wait_until(
            lambda: value(scrape(port)[1], "ckpt_trashed_total") == 2, 60, "two trashed"
        )
        daemon.wait_until(
            lambda: hooks_out.exists() and len(hooks_out.read_text().splitlines()) == 5,
            60,
            "five hook documents",
        )
        daemon.wait_until(
            lambda: (
                value(scrape(port)[1], "ckpt_last_success_timestamp_seconds", job="retention")
                > started
            ),
            60,
            "the retention job's success time",
        )
        # The trash moves hint their folders: the worker settles them, then the heartbeat
        # (which `ckpt metrics` reads) says so too.
        daemon.wait_until(
            lambda: value(scrape(port)[1], "ckpt_worker_queue_length") == 0, 60, "queue empty"
        )
        textfile = base / "textfile" / "ckpt.prom"
        textfile.parent.mkdir()
        scraped: list[tuple[str, Any]] = []

        def settled() -> bool:
            # The heartbeat's queue (the textfile) and the live one (a scrape) both empty at
            # once: a periodic rescan may queue files again in between, on a busy machine.
            if ws.run("metrics", "--textfile", str(textfile)).returncode != 0:
                return False
            if value(parse(textfile.read_text()), "ckpt_worker_queue_length") != 0:
                return False
            scraped[:] = [scrape(port)]
            return value(scraped[0][1], "ckpt_worker_queue_length") == 0

        daemon.wait_until(settled, 60, "the heartbeat's and the live queue empty")
        text, samples = scraped[0]
    finally:  # stopped here: the suite kills every daemon still running after each test
        code = daemon.stop()
    assert code == 0, daemon.log
    return {
        "ws": ws,
        "daemon": daemon,
        "started": started,
        "text": text,
        "samples": samples,
        "textfile": textfile,
        "hooks": [json.loads(line) for line in hooks_out.read_text().splitlines()],
        "sizes": {
            "ok": (run / ZIP_FILES[2]).stat().st_size + (legacy / "full.h5").stat().st_size,
            "trash": sum((keras_checkpoints / ZIP_RUN / n).stat().st_size for n in ZIP_FILES[:2]),
            "corrupt": 5000,
            "version": padded.stat().st_size,  # the copy of generation 1, padded, uncompressed
        },
    }


def test_a_live_scrape_has_every_metric_with_its_exact_value(scenario: dict[str, Any]) -> None:
    s, ws, sizes = scenario["samples"], scenario["ws"], scenario["sizes"]
    root = str(ws.root)
    statuses = {k[1][0][1]: v for k, v in s.items() if k[0] == "ckpt_checkpoints"}
    assert statuses == {
        "ok": 2,
        "trashed": 2,
        "corrupt": 1,
        "incomplete": 0,
        "unreadable": 0,
        "missing": 0,
        "removed": 0,
        "standby": 1,  # full.h5 is a fixed name: its generation 1 kept (before the compress)
        "purged": 0,
        "abandoned": 0,
    }
    assert value(s, "ckpt_bytes", root=root, kind="checkpoint") == sizes["ok"] + sizes["corrupt"]
    assert value(s, "ckpt_bytes", root=root, kind="trash") == sizes["trash"]
    assert value(s, "ckpt_bytes", root=root, kind="inference_artifact") == 0
    assert value(s, "ckpt_bytes", root=root, kind="version") == sizes["version"]
    assert value(s, "ckpt_root_free_bytes", root=root) > 0
    assert value(s, "ckpt_root_min_free_bytes", root=root) == 0
    # Counters from the audit log: all time.
    assert value(s, "ckpt_indexed_total") == 4
    assert value(s, "ckpt_trashed_total") == 2
    assert value(s, "ckpt_compressed_total") == 1
    assert value(s, "ckpt_purged_total") == 0
    assert value(s, "ckpt_demoted_total") == 0
    assert value(s, "ckpt_split_total") == 0
    errors = {k[1][0][1]: v for k, v in s.items() if k[0] == "ckpt_errors_total"}
    assert errors == {
        "index": 1,
        "scan": 0,
        "worker": 0,
        "job": 0,
        "scheduler": 0,
        "hook": 0,
        "stage": 0,
    }
    # The latency of the rows on disk, not trashed, whose bytes were read (e03 and full.h5; the
    # corrupt one never was): copied just now, so within the settle time plus a busy
    # machine's slack.
    assert value(s, "ckpt_index_latency_seconds_count") == 2
    assert value(s, "ckpt_index_latency_seconds_bucket", le="+Inf") == 2
    assert value(s, "ckpt_index_latency_seconds_bucket", le="60.0") == 2
    assert 0 < value(s, "ckpt_index_latency_seconds_sum") < 180
    assert value(s, "ckpt_worker_queue_length") == 0
    now = time.time()
    assert scenario["started"] < value(s, "ckpt_last_scan_timestamp_seconds") < now
    assert scenario["started"] < value(s, "ckpt_heartbeat_timestamp_seconds") < now
    assert scenario["started"] < value(s, "ckpt_last_success_timestamp_seconds", job="retention")
    info = [k for k in s if k[0] == "ckpt_daemon_info"]
    assert len(info) == 1 and s[info[0]] == 1
    assert {name for name, _ in info[0][1]} == {"version", "python", "sqlite"}
    assert all(name.startswith("ckpt_") for name, _ in s)


def test_the_textfile_is_the_same_text_written_atomically(scenario: dict[str, Any]) -> None:
    textfile: Path = scenario["textfile"]
    live, written = scenario["samples"], parse(textfile.read_text())
    # Free bytes move with every write on the disk; the heartbeat and the retention job (1s)
    # every second.
    moving = {
        "ckpt_root_free_bytes",
        "ckpt_heartbeat_timestamp_seconds",
        "ckpt_last_success_timestamp_seconds",
    }
    # which jobs have a last-success time depends on the heartbeat the textfile was made from
    assert {k for k in written if k[0] not in moving} == {k for k in live if k[0] not in moving}
    assert {k: v for k, v in written.items() if k[0] not in moving} == {
        k: v for k, v in live.items() if k[0] not in moving
    }
    assert [p.name for p in textfile.parent.iterdir()] == ["ckpt.prom"]  # no temp left


def test_hooks_got_one_document_per_event(scenario: dict[str, Any]) -> None:
    docs, ws = scenario["hooks"], scenario["ws"]
    run = ws.root / ZIP_RUN
    fields = {"event", "path", "run", "metric", "value", "reason", "at"}
    assert all(fields <= set(d) for d in docs)
    best = [(d["path"], d["metric"], d["value"], d["run"]) for d in docs if d["event"] == NEW]
    assert best == [  # e01 (1.683) came after e02 (1.663): not a new best
        (str(run / ZIP_FILES[1]), "val_loss", 1.663, ZIP_RUN),
        (str(run / ZIP_FILES[2]), "val_loss", 1.643, ZIP_RUN),
    ]
    corrupt = [d for d in docs if d["event"] == "corrupt"]
    assert [d["path"] for d in corrupt] == [str(ws.root / "legacy" / "cut.keras")]
    assert corrupt[0]["reason"]
    assert corrupt[0]["run"] == "legacy"  # its run, as new_best and retention give theirs
    retention = sorted(d["path"] for d in docs if d["event"] == "retention")
    assert retention == [str(run / ZIP_FILES[0]), str(run / ZIP_FILES[1])]
    assert all(d["run"] == ZIP_RUN and d["reason"] for d in docs if d["event"] == "retention")


def test_a_bad_metrics_address_exits_2_with_the_key(scenario: dict[str, Any]) -> None:
    ws: Workspace = scenario["ws"]
    bad = ws.base / "bad.yaml"
    bad.write_text(
        ws.config.read_text().replace("metrics_listen: 127.0.0.1:0", "metrics_listen: nowhere")
    )
    result = ws.run("--config", str(bad), "serve", check=False)
    assert result.returncode == 2
    assert "service.metrics_listen" in result.stderr
