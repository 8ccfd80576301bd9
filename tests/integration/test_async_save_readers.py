"""The Orbax and DCP readers and the save verdict on folders the real libraries wrote.

The saves come from `tests/support/async_saves.py` (Keras 3's OrbaxCheckpoint in a real fit()
with KERAS_BACKEND=jax, orbax's CheckpointManager sync and async, dcp.save / dcp.async_save, an
async Orbax save SIGKILLed mid-way), each with the writer's truth. Nothing here imports jax,
orbax or torch.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt_daemon.core.model import Format, Kind
from ckpt_daemon.core.save_verdict import SaveState, judge
from ckpt_daemon.formats import dcp_folder, folder_saves, orbax_step

HOUR = 3600.0


def truth(run: Path) -> dict:
    return json.loads((run / "truth.json").read_text())


def verdict_now(folder: Path, abandoned_after: float = HOUR, settle: float = 5.0) -> SaveState:
    seen = folder_saves.look(folder).seen
    return judge(seen, time.time_ns(), abandoned_after, settle).state


def test_keras_orbax_callback_steps_read_from_json(async_saves: Path) -> None:
    run = async_saves / "keras-orbax"
    expected = truth(run)
    assert expected["steps"]  # max_to_keep=2 of 3 epochs (0-based)
    for step in expected["steps"]:
        save = folder_saves.look(run / str(step))
        assert save.format is Format.ORBAX and save.step == step
        assert save.info is not None and save.info.kind is Kind.FULL
        names = {w.name for w in save.info.layers[0].weights}
        for path, shape in expected["weights"].items():
            name = "trainable_variables." + path.replace("/", ".")
            assert name in names, (name, sorted(names))
            shown = next(w for w in save.info.layers[0].weights if w.name == name)
            assert list(shown.shape) == shape
        assert save.info.n_params == expected["n_params"]
        assert save.info.optimizer is not None and save.info.optimizer.name == "adam"
        assert judge(save.seen, time.time_ns(), HOUR, 0).state is SaveState.COMPLETE


@pytest.mark.parametrize("mode", ["orbax-sync", "orbax-async"])
def test_checkpoint_manager_steps_with_their_best_fn_metrics(async_saves: Path, mode: str) -> None:
    run = async_saves / mode
    expected = truth(run)
    assert expected["best_step"] in expected["steps"]
    for step in expected["steps"]:
        save = folder_saves.look(run / str(step))
        assert save.step == step
        assert dict(save.metrics) == {"loss": expected["losses"][str(step)]}
        assert save.info is not None
        weights = {w.name: list(w.shape) for w in save.info.layers[0].weights}
        for name in ("params.dense.kernel", "params.out.bias"):
            assert weights[name] == expected["leaves"][name]
        assert "opt_state.mu.dense.kernel" not in weights  # optimizer state kept apart
        assert save.info.optimizer is not None and save.info.optimizer.n_variables == 1
        assert save.info.weights_bytes and save.info.weights_bytes > 0
        assert save.seen.unfinished == () and save.seen.unconfirmed == ()
    best = min(expected["steps"], key=lambda s: expected["losses"][str(s)])
    assert best == expected["best_step"]


@pytest.mark.parametrize("run", ["dcp/step-7", "dcp-async/step-8"])
def test_dcp_folder_read_through_the_restricted_unpickler(async_saves: Path, run: str) -> None:
    expected = truth(async_saves / "dcp")
    folder = async_saves / run
    dcp = dcp_folder.read_folder(folder)
    assert dcp.problems == ()
    tensors = {t.key: t for t in dcp.tensors}
    for key, (shape, dtype) in expected["model"].items():
        assert list(tensors[key].shape) == shape
        assert tensors[key].dtype == dtype.removeprefix("torch.")
        assert tensors[key].chunks and list(tensors[key].chunks[0][1]) == shape
    assert "step" in dcp.values
    assert list(dcp.needed) == ["__0_0.distcp"]
    assert dcp.needed["__0_0.distcp"] <= (folder / "__0_0.distcp").stat().st_size
    info = dcp_folder.info_of(dcp)
    assert info.weights_bytes == expected["model_bytes"]
    assert info.optimizer is not None and info.optimizer.state_bytes > 0
    save = folder_saves.look(folder)
    assert save.step == int(run.rsplit("-", 1)[1])
    assert verdict_now(folder, settle=0) is SaveState.COMPLETE


def test_orbax_save_killed_mid_way_is_incomplete_then_abandoned_never_complete(
    async_saves: Path,
) -> None:
    killed = async_saves / "killed"
    tmp = killed / "2.orbax-checkpoint-tmp"
    assert tmp.is_dir() and not (killed / "2").exists()
    save = folder_saves.look(tmp)
    assert save.step == 2 and save.seen.writers == ()
    assert any("in-flight" in sign for sign in save.seen.unfinished)
    # killed before or after `_CHECKPOINT_METADATA` was first written: either way a sign
    assert any("commit timestamp" in s or "metadata" in s for s in save.seen.unfinished)
    newest = save.seen.newest_mtime_ns
    young = judge(save.seen, newest + int(0.5e9), abandoned_after_s=2.0, settle_s=0.0)
    assert young.state is SaveState.INCOMPLETE and "in flight" in (young.reason or "")
    old = judge(save.seen, newest + int(3e9), abandoned_after_s=2.0, settle_s=0.0)
    assert old.state is SaveState.ABANDONED and "did not complete" in (old.reason or "")
    for later in (0, 1, 10, 10_000):
        state = judge(save.seen, newest + later * 10**9, 2.0, 0.0).state
        assert state is not SaveState.COMPLETE
    # the step saved before the kill is complete
    assert verdict_now(killed / "1", settle=0) is SaveState.COMPLETE


def test_a_writer_holding_a_file_open_keeps_the_save_incomplete(
    async_saves: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(async_saves / "orbax-sync" / "3", tmp_path / "3")
    assert verdict_now(folder, settle=0) is SaveState.COMPLETE
    target = folder / "default" / "_METADATA"
    code = f"f = open({str(target)!r}, 'ab'); print('open', flush=True); input()"
    writer = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "open"
        seen = folder_saves.look(folder).seen
        assert seen.writers and f"pid {writer.pid}" in seen.writers[0]
        verdict = judge(seen, time.time_ns() + 10**13, 1.0, 0.0)  # long untouched: still written
        assert verdict.state is SaveState.INCOMPLETE and "being written" in (verdict.reason or "")
    finally:
        writer.kill()
        writer.communicate()  # reaped, its pipes closed


def test_dcp_resave_under_the_old_metadata_is_not_complete(
    async_saves: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(async_saves / "dcp" / "step-7", tmp_path / "step-7")
    data = folder / "__0_0.distcp"
    with data.open("r+b") as fh:  # what a re-save killed mid-way leaves: a shorter data file
        fh.truncate(data.stat().st_size // 2)
    save = folder_saves.look(folder)
    assert any("needs" in p for p in save.seen.unfinished), save.seen
    assert judge(save.seen, time.time_ns(), HOUR, 0).state is SaveState.INCOMPLETE
    (folder / dcp_folder.METADATA).unlink()
    save = folder_saves.look(folder)
    assert save.seen.unfinished and "no .metadata" in save.seen.unfinished[0]


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return (os.system, (self.command,))


def test_hostile_dcp_metadata_is_never_executed(async_saves: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "PWNED"
    root = tmp_path / "root"
    folder = shutil.copytree(async_saves / "dcp" / "step-7", root / "run" / "step-7")
    (folder / dcp_folder.METADATA).write_bytes(pickle.dumps(_System(f"touch {marker}"), 4))
    save = folder_saves.look(folder, root)
    assert not marker.exists()
    assert save.info is None and save.problem is not None
    assert "posix.system" in save.problem, save.problem
    # the same call hidden inside a Metadata-looking record
    wrapped = {"state_dict_metadata": {"x": _System(f"touch {marker}")}, "storage_data": {}}
    (folder / dcp_folder.METADATA).write_bytes(pickle.dumps(wrapped, 4))
    save = folder_saves.look(folder, root)
    assert not marker.exists() and save.problem is not None


def test_orbax_reader_needs_no_framework_import(async_saves: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from ckpt_daemon.formats import folder_saves;"
        f"folder_saves.look(Path({str(async_saves / 'keras-orbax')!r}) / '2');"
        f"folder_saves.look(Path({str(async_saves / 'dcp' / 'step-7')!r}));"
        "bad = [m for m in ('jax', 'orbax', 'torch', 'tensorstore', 'keras') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert orbax_step.step_of("12.orbax-checkpoint-tmp-1010101") == (12, True)
    assert orbax_step.step_of("12") == (12, False) and orbax_step.step_of("x12") is None
