"""Fixtures shared by every test folder: real Keras/TensorFlow checkpoints + ground truth, CLI
workspaces and daemons. Only declarations: what they are built from lives in `tests.support`.

TensorFlow and Keras are never imported into the pytest process: the checkpoints are written
by ``tests/support/keras_fixtures.py`` in child processes. Set ``CKPT_TEST_FIXTURES=/some/dir``
to reuse one generated set across runs (it is generated there once, if the directory is absent).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support import (
    Daemon,
    Workspace,
    copy_generated,
    kill_started,
    service_workspace,
    thread_leaks,
)
from tests.support.async_saves import session_async_saves
from tests.support.bytecode import compile_once
from tests.support.catalogs import BACKENDS, catalog_urls
from tests.support.checkpoints import checkpoints_folder
from tests.support.deepspeed_runs import session_deepspeed_runs
from tests.support.hf_runs import session_hf_runs
from tests.support.postgres import PostgresServer, start_server
from tests.support.schedule import longest_first
from tests.support.shared_fixtures import generated_once, session_root
from tests.support.torch_runs import session_torch_files
from tests.support.training_runs import session_training_runs


def pytest_configure(config: pytest.Config) -> None:
    """Properties run on a shared 2-core machine, often beside a training child: how long
    Hypothesis takes to generate or run an example says nothing about the property, so neither
    the deadline nor the too-slow health check may fail a test (a test's own @settings keeps
    these unless it names suppress_health_check itself: then it lists too_slow too)."""
    settings.register_profile(
        "ckpt",
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.load_profile("ckpt")
    if not hasattr(config, "workerinput"):  # once, in the controller, before any worker starts
        compile_once()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, for the xdist workers (tests/support/schedule.py)."""
    longest_first(items)


@pytest.fixture(scope="session")
def keras_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of real checkpoints; ``manifest.json`` in it holds the ground truth."""
    return checkpoints_folder(tmp_path_factory)


@pytest.fixture(scope="session")
def training_runs(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Path:
    """Real training runs named as users name them; ``<framework>-truth.json`` in it holds what
    every checkpoint is (epoch, step, logs, generations)."""
    return session_training_runs(keras_checkpoints, session_root(tmp_path_factory))


@pytest.fixture(scope="session")
def torch_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real torch, safetensors and Lightning files (tests/support/torch_runs.py, written in
    child processes): `plain/` with `plain-truth.json`, `pl/` (a Lightning run) with
    `pl/lightning-truth.json`. `CKPT_TORCH_FIXTURES` names a folder of them to reuse."""
    return session_torch_files(tmp_path_factory)


@pytest.fixture(scope="session")
def async_saves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real Orbax and DCP saves (tests/support/async_saves.py, written in child processes):
    `keras-orbax/`, `orbax-sync/`, `orbax-async/`, `dcp/`, `dcp-async/`, `killed/` (an async
    Orbax save SIGKILLed mid-way), each run with its `truth.json`. `CKPT_ASYNC_FIXTURES` names
    a folder to cache them in, keyed by the generator's content."""
    return session_async_saves(tmp_path_factory)


@pytest.fixture(scope="session")
def hf_runs() -> Path:
    """Real Hugging Face folders (tests/support/hf_runs.py, written in a child): a Trainer run's
    `trainer/out/checkpoint-N/`, `pretrained/`, `sharded/`, `sharded-bin/`, with `hf-truth.json`.
    Generated once per content of that script into `$CKPT_HF_FIXTURES` (default: the system temp
    folder's `ckpt-hf-fixtures/`), and read-only for tests: copy before changing anything."""
    return session_hf_runs()


@pytest.fixture(scope="session")
def deepspeed_runs() -> Path:
    """Real DeepSpeed ZeRO-2 and ZeRO-3 checkpoints of 2 CPU ranks (tests/support/deepspeed_runs.py,
    written by torchrun in a child), DeepSpeed's own consolidation of each tag beside them and
    `ds-truth.json`. Cached by the script's content like `hf_runs`; read-only for tests."""
    return session_deepspeed_runs()


@pytest.fixture(scope="session")
def peft_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real PEFT LoRA adapters of a tiny BERT and their base (tests/support/peft_runs.py, written
    by peft's `save_pretrained` in a child): `models/tiny-bert/`, `runs/{linked,bin,orphan}/lora/`,
    `runs/trainer/out/checkpoint-2/`, with `peft-truth.json`. Once per session; read-only."""
    from tests.support import peft_runs as writer

    return generated_once(tmp_path_factory, "peft", writer.generate)


@pytest.fixture(scope="session")
def manifest(keras_checkpoints: Path) -> dict[str, dict[str, Any]]:
    """Ground truth: {path relative to keras_checkpoints: expected metadata}."""
    return json.loads((keras_checkpoints / "manifest.json").read_text())


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def keras_root(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    """A workspace whose root holds a copy of every generated Keras/TF checkpoint."""
    return copy_generated(workspace, keras_checkpoints)


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    """One full scan of every generated checkpoint, shared by a module's read-only tests."""
    ws = copy_generated(Workspace(tmp_path_factory.mktemp("scanned")), keras_checkpoints)
    ws.run("scan")
    return ws


@pytest.fixture(autouse=True)
def _the_ckpt_logger_is_left_as_found() -> Iterator[None]:
    """A test that runs the CLI in this process (`cli.main.run`) sets the `ckpt` logger up on
    its captured stderr, closed after the test, and stops propagation: a later test's caplog
    then saw none of our events ('I/O operation on closed file'). Restored after each test."""
    logger = logging.getLogger("ckpt")
    handlers, propagate, level = list(logger.handlers), logger.propagate, logger.level
    yield
    logger.handlers[:], logger.propagate = handlers, propagate
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _no_daemon_outlives_its_test() -> Iterator[None]:
    """A test that fails while a daemon runs must not leave it running."""
    yield
    kill_started()


@pytest.fixture(autouse=True, scope="session")
def _no_thread_outlives_the_session() -> Iterator[None]:
    """Session fixtures stop what they started (tests.support.thread_leaks)."""
    before = thread_leaks.snapshot()
    yield
    thread_leaks.assert_none_left(before, "the session's fixtures were torn down")


@pytest.fixture(autouse=True, scope="module")
def _no_thread_outlives_its_module() -> Iterator[None]:
    """A module's fixtures stop what they started."""
    before = thread_leaks.snapshot()
    yield
    thread_leaks.assert_none_left(before, "the module's fixtures were torn down")


@pytest.fixture(autouse=True)
def _no_thread_outlives_its_test() -> Iterator[None]:
    """A test and its function fixtures stop every thread of ours and every non-daemon thread
    they started (checked after those fixtures were torn down)."""
    before = thread_leaks.snapshot()
    yield
    thread_leaks.assert_none_left(before, "the test and its fixtures")


@pytest.fixture
def daemon_ws(tmp_path: Path) -> Iterator[tuple[Workspace, Daemon]]:
    """A service workspace and a started daemon (stopped, exit code checked, at teardown)."""
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    yield ws, daemon
    if daemon.proc.poll() is None:
        assert daemon.stop() == 0, daemon.log


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for this test process (started on first use; a failure to start
    fails the tests that need it, with the reason)."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new catalog's URL, once per backend: an SQLite file (created and migrated by the first
    `Store`), a PostgreSQL database at head."""
    yield from catalog_urls(request, tmp_path, at_head=True)


@pytest.fixture(params=BACKENDS)
def empty_catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Like `catalog_url`, but PostgreSQL's database is empty too: the migrations run on it."""
    yield from catalog_urls(request, tmp_path, at_head=False)
