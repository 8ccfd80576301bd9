"""`ckpt split` of Hugging Face Trainer folders (transforms.hf_split) on real Trainer runs
(tests/support/hf_runs.py): `checkpoint-N/` -> `inference-N/` beside it, its files byte for byte
without optimizer, scheduler, RNG and trainer state, which transformers' `from_pretrained`
(in a child) loads and which predicts exactly as the checkpoint does; the checkpoint folder's
mtime never touched (the Trainer's save_total_limit rotation reads it) and no folder named
`checkpoint-*` made (the rotation would delete it); registered, marked, carded, checked by
`ckpt verify --load`; split on schedule by a live daemon (`artifacts.split_after`) like Keras
files and torch files; demoted by retention (`max_bytes`). torch and transformers are never
imported by the test process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ckpt_daemon.fs.temp_names import _host_tag
from tests.support import Daemon, Workspace, service_workspace
from tests.support.hf_runs import inference_check, load_truth

DROPPED = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}
DROPPED |= {"training_args.bin"}
MARKER = ".ckpt-artifact.json"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    return dst


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {str(Path(r["path"]).relative_to(ws.root)): r for r in ws.json("list", "--all")}


def _state(folder: Path) -> dict[str, Any]:
    """The folder's own mtime and inode, and every file's bytes and mtime."""
    info = os.lstat(folder)
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}
    return {"folder": (info.st_ino, info.st_mtime_ns), "files": files}


def test_split_trainer_folders_into_inference_folders_that_from_pretrained_loads(
    workspace: Workspace, hf_runs: Path
) -> None:
    ws = workspace
    out = _copy(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    sharded = _copy(hf_runs / "trainer-sharded" / "out", ws.root / "sharded" / "out")
    _copy(hf_runs / "pretrained" / "tiny", ws.root / "pretrained" / "tiny")
    ws.run("scan")
    rows = _rows(ws)
    sources = {name: out / name for name in ("checkpoint-4", "checkpoint-6")}
    sources["sharded-4"] = sharded / "checkpoint-4"
    before = {name: _state(folder) for name, folder in sources.items()}
    results = {}
    for name, folder in sources.items():
        row = rows[str(folder.relative_to(ws.root))]
        assert row["optimizer_bytes"] > 0, row
        results[name] = ws.json("split", str(row["id"]))
    # The checkpoints were only read: not a byte, not an mtime (the folder's own) changed.
    assert {name: _state(folder) for name, folder in sources.items()} == before
    for name, folder in sources.items():
        artifact = Path(results[name]["artifact"])
        assert artifact == folder.with_name(folder.name.replace("checkpoint-", "inference-"))
        kept = sorted(set(before[name]["files"]) - DROPPED)
        assert sorted(p.name for p in artifact.iterdir()) == sorted([*kept, MARKER]), name
        for file in kept:  # byte copies, the trainer's times kept
            assert (artifact / file).read_bytes() == before[name]["files"][file][0], file
            assert (artifact / file).stat().st_mtime_ns == before[name]["files"][file][1]
        mark = json.loads((artifact / MARKER).read_text())["ckpt_daemon_artifact"]
        assert mark["parent"] == str(folder) and mark["kind"] == "inference", mark
        card = artifact.with_name(artifact.name + ".md").read_text()
        quoted = json.dumps(str(artifact))
        assert f"transformers.BertForSequenceClassification.from_pretrained({quoted})" in card
        assert "no optimizer, scheduler, RNG or trainer state" in card, card
    shard_names = load_truth(hf_runs)["trainer-sharded"]["folders"]["checkpoint-4"]["shards"]
    assert set(shard_names) <= {p.name for p in (sharded / "inference-4").iterdir()}
    # Nothing of ours is a folder the Trainer's rotation takes.
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-4", "checkpoint-6", "inference-4", "inference-4.md",
        "inference-6", "inference-6.md",
    ]  # fmt: skip

    checked = inference_check(
        [(folder, Path(results[name]["artifact"])) for name, folder in sources.items()]
    )
    for name, folder in sources.items():
        found = checked[results[name]["artifact"]]
        assert found["identical"] and found["class"] == "BertForSequenceClassification", found
        # The Trainer's rotation and resume see the checkpoints only, never an inference folder.
        assert found["rotation_sees"] == sorted(p.name for p in folder.parent.glob("checkpoint-*"))
        assert found["last_checkpoint"] == max(found["rotation_sees"]), found
    logits = [checked[str(out / f"inference-{n}")]["logits"] for n in (4, 6)]
    assert logits[0] != logits[1]  # two different steps of training, each predicted exactly
    tokenized = checked[str(sharded / "inference-4")]["tokenized"]
    assert tokenized is not None and len(tokenized) > 2  # the sharded run's tokenizer loads

    ws.run("scan")  # the inference folders are ours, never new checkpoints
    assert set(_rows(ws)) == set(rows)
    copied = _copy(out / "inference-6", ws.root / "shared" / "bert")  # by hand: its marker goes too
    report = ws.json("scan")
    assert set(_rows(ws)) == set(rows), report
    skipped = {d["path"]: d["reason"] for d in report["skipped"]}
    assert skipped[str(copied)] == f"an artifact ckpt derived from {out / 'checkpoint-6'}"
    shown = ws.json("show", str(rows["hf/out/checkpoint-6"]["id"]))
    inference = {a["path"]: a for a in shown["artifacts"] if a["kind"] == "inference"}
    assert {a["kind"] for a in shown["artifacts"]} == {"inference", "card"}, shown["artifacts"]
    assert set(inference) == {str(out / "inference-6"), str(copied)}  # the copy, adopted
    assert inference[str(out / "inference-6")]["bytes"] == results["checkpoint-6"]["bytes"]
    assert inference[str(copied)]["hash"] == results["checkpoint-6"]["hash"]
    best = ws.json("best", "--metric", "eval_loss", "--run", "hf/out", "--artifact", "inference")
    lowest = min(
        ("checkpoint-4", "checkpoint-6"), key=lambda n: rows[f"hf/out/{n}"]["metrics"]["eval_loss"]
    )
    assert best["path"] == str(out / lowest.replace("checkpoint-", "inference-")), best

    ids = [str(rows[str(f.relative_to(ws.root))]["id"]) for f in sources.values()]
    verdicts = ws.json("verify", "--load", *ids)
    assert all(v["ok"] for v in verdicts), verdicts
    loads = [v for v in verdicts if "loads with torch" in v["detail"]]
    assert len(loads) == 3, verdicts
    assert all(
        "identical tensors and predicts identically through "
        "BertForSequenceClassification.from_pretrained" in v["detail"]
        for v in loads
    ), loads
    assert len([v for v in verdicts if "inference artifact hash matches" in v["detail"]]) == 4

    again = ws.json("split", str(rows["hf/out/checkpoint-6"]["id"]))  # its own: kept as it is
    assert again["hash"] == results["checkpoint-6"]["hash"], again
    # The share is of the whole folder (optimizer and trainer state too), not of what was copied.
    for name in sources:
        whole = sum(len(data) for data, _mtime in before[name]["files"].values())
        assert results[name]["source_bytes"] == whole > results[name]["bytes"], name
    said = ws.run("split", str(rows["hf/out/checkpoint-6"]["id"])).stdout.splitlines()[0]
    share = results["checkpoint-6"]["bytes"] / results["checkpoint-6"]["source_bytes"]
    assert said.endswith(f"({share:.0%} of hf/out/checkpoint-6)") and share < 0.995, said
    for verb, ref, word in (
        ("compress", "hf/out/checkpoint-6", "Hugging Face folder"),
        ("split", "pretrained/tiny", "no optimizer state"),
    ):
        refused = ws.run(verb, str(rows[ref]["id"]), check=False)
        assert refused.returncode == 2 and word in refused.stderr, (verb, refused)
    assert "torch" not in sys.modules and "transformers" not in sys.modules


def test_nothing_is_replaced_nor_written_into_a_checkpoint_and_a_changed_copy_fails_verify(
    workspace: Workspace, hf_runs: Path
) -> None:
    ws = workspace
    out = _copy(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    (out / "inference-4").mkdir()  # someone else's folder at the name: never replaced
    (out / "inference-4" / "notes.txt").write_text("mine")
    ws.run("scan")
    rows = _rows(ws)
    refused = ws.run("split", str(rows["hf/out/checkpoint-4"]["id"]), check=False)
    assert refused.returncode == 2 and "refused, nothing replaced" in refused.stderr, refused
    assert [p.name for p in (out / "inference-4").iterdir()] == ["notes.txt"]
    assert not [p for p in out.iterdir() if p.name.startswith(".ckpt-tmp-")]
    into = str(out / "checkpoint-6")  # a new entry there would make it "newest": refused
    refused = ws.run("split", str(rows["hf/out/checkpoint-4"]["id"]), "--out", into, check=False)
    assert refused.returncode == 2 and "inside a Trainer checkpoint" in refused.stderr, refused
    exports = ws.root / "exports"
    exports.mkdir()
    elsewhere = ws.json("split", str(rows["hf/out/checkpoint-4"]["id"]), "--out", str(exports))
    assert elsewhere["artifact"] == str(exports / "inference-4"), elsewhere
    assert (exports / "inference-4.md").is_file()
    assert sorted(p.name for p in (out / "checkpoint-6").iterdir()) == sorted(
        p.name for p in (hf_runs / "trainer" / "out" / "checkpoint-6").iterdir()
    )
    ident = str(rows["hf/out/checkpoint-6"]["id"])
    artifact = Path(ws.json("split", ident)["artifact"])
    weights = artifact / "model.safetensors"
    weights.chmod(0o600)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    result = ws.run("verify", "--load", "--json", ident, check=False)
    verdicts = json.loads(result.stdout)
    assert result.returncode == 3 and "2 of 4 failed" in result.stderr, result
    failed = {v["detail"] for v in verdicts if not v["ok"]}
    assert "inference artifact hash differs" in failed, verdicts
    assert any("different tensors: " in d for d in failed), verdicts
    refused = ws.run("split", ident, check=False)  # changed: not ours to replace any more
    assert refused.returncode == 2 and "not this checkpoint's artifact" in refused.stderr


def test_a_killed_splits_temp_folder_is_never_indexed_and_is_removed(
    workspace: Workspace, hf_runs: Path
) -> None:
    """What a split killed while copying leaves (its temp folder, named with its dead pid) is
    skipped by scans (it holds config.json and weights) and removed by the next split there."""
    ws = workspace
    out = _copy(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    # pid 4194303: above any pid this machine has handed out (pid_max 4194304 at most)
    leftover = out / f".ckpt-tmp-4194303h{_host_tag()}-0badcafe-inference-6"
    leftover.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(out / "checkpoint-6" / name, leftover / name)
    ws.run("scan")
    assert set(_rows(ws)) == {"hf/out/checkpoint-4", "hf/out/checkpoint-6"}
    ws.json("split", str(_rows(ws)["hf/out/checkpoint-6"]["id"]))
    assert not leftover.exists()
    assert (out / "inference-6" / "model.safetensors").is_file()


def test_the_service_splits_cold_hf_folders_and_torch_files_on_schedule(
    tmp_path: Path, hf_runs: Path, torch_files: Path
) -> None:
    ws = service_workspace(tmp_path, extra="artifacts: {split_after: 1s}\n")
    ws.config.write_text(
        ws.config.read_text().replace(
            "schedule:\n  rescan: 0\n", "schedule:\n  rescan: 0\n  artifacts: 1s\n  verify: 0\n"
        )
    )
    out = _copy(hf_runs / "trainer" / "out", ws.root / "hf" / "out")
    plain = ws.root / "plain"
    plain.mkdir()
    shutil.copy2(torch_files / "plain" / "full.pt", plain / "full.pt")
    before = _state(out / "checkpoint-6")
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")

    def done() -> bool:
        rows = _rows(ws)
        if len(rows) < 3:
            return False
        kinds = [
            {a["kind"] for a in ws.json("show", str(r["id"]))["artifacts"]} for r in rows.values()
        ]
        return all(k == {"inference", "card"} for k in kinds)

    daemon.wait_until(done, 120, "inference artifacts of two HF folders and a torch file")
    assert (out / "inference-4" / "config.json").is_file()
    assert (out / "inference-6" / "model.safetensors").is_file()
    assert (plain / "full.inference.safetensors").is_file()
    assert set(_rows(ws)) == {"hf/out/checkpoint-4", "hf/out/checkpoint-6", "plain/full.pt"}
    assert _state(out / "checkpoint-6") == before
    actors = {e["actor"] for e in ws.json("log") if e["action"] == "split"}
    assert actors and all(a.startswith("daemon:") for a in actors), actors
    assert daemon.stop() == 0


def test_retention_demotes_an_hf_folder_to_its_inference_folder(
    workspace: Workspace, hf_runs: Path
) -> None:
    """Over a run's `max_bytes`, the older Trainer checkpoint (of the sharded run, which names
    no best) is demoted: its inference folder written, then the checkpoint folder moved to the
    trash whole, and back on restore."""
    ws = workspace
    source = hf_runs / "trainer-sharded" / "out"
    out = _copy(source, ws.root / "hf" / "out")
    total = sum(p.stat().st_size for p in (out / "checkpoint-4").iterdir())
    policy = f"retention:\n  keep_last: 2\n  max_bytes: {total * 7 // 4}\n"
    ws.config.write_text(ws.config.read_text() + policy)
    ws.run("scan")
    rows = _rows(ws)
    planned = ws.json("prune", "--dry-run")
    decided = [d for run in planned["runs"] for d in run["decisions"]]
    actions = {Path(d["path"]).name: d["action"] for d in decided}
    assert actions == {"checkpoint-2": "demote", "checkpoint-4": "keep"}, decided
    ws.run("prune")
    assert not (out / "checkpoint-2").exists() and (out / "checkpoint-4").is_dir()
    assert (out / "inference-2" / "model.safetensors.index.json").is_file()
    assert (out / "inference-2" / "tokenizer.json").is_file()
    assert _rows(ws)["hf/out/checkpoint-2"]["status"] == "trashed"
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-4", "inference-2", "inference-2.md"
    ]  # fmt: skip
    ws.run("trash", "restore", str(rows["hf/out/checkpoint-2"]["id"]))
    assert sorted(p.name for p in (out / "checkpoint-2").iterdir()) == sorted(
        p.name for p in (source / "checkpoint-2").iterdir()
    )


def test_a_trashed_checkpoint_takes_its_inference_folder_along_and_back(
    workspace: Workspace, hf_runs: Path
) -> None:
    """Retention's trash moves an HF checkpoint and its inference folder (and card) whole,
    restore brings all three back, purge deletes them; nothing is left in the run folder."""
    ws = workspace
    out = _copy(hf_runs / "trainer-sharded" / "out", ws.root / "hf" / "out")
    ws.run("scan")
    ident = str(_rows(ws)["hf/out/checkpoint-2"]["id"])
    artifact = Path(ws.json("split", ident)["artifact"])
    split = _state(artifact)
    ws.run("prune", "--keep-last", "1")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4"]
    ws.run("trash", "restore", ident)
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-2", "checkpoint-4", "inference-2", "inference-2.md"
    ]  # fmt: skip
    assert _state(artifact)["files"] == split["files"]
    verdicts = ws.json("verify", ident)
    assert all(v["ok"] for v in verdicts) and len(verdicts) == 3, verdicts
    ws.run("prune", "--keep-last", "1")
    purged = ws.json("trash", "purge", "--older-than", "0s")
    assert purged["purged"], purged
    assert not (ws.root / ".ckpt-trash").exists() or not any((ws.root / ".ckpt-trash").rglob("*"))
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4"]


def test_a_live_trainer_rotates_only_its_checkpoints_while_the_daemon_splits_them(
    tmp_path: Path,
) -> None:
    """A real Trainer (save_total_limit 2, rotation by mtime) trains into a watched root while
    the daemon splits each checkpoint on schedule; the Trainer waits for each split before it
    trains on. Its rotation then deletes exactly the oldest checkpoint and none of the
    inference folders beside them (that the split never changes a checkpoint folder's mtime is
    checked directly by the first test of this file)."""
    ws = service_workspace(tmp_path, extra="artifacts: {split_after: 0s}\n")
    ws.config.write_text(
        ws.config.read_text().replace(
            "schedule:\n  rescan: 0\n", "schedule:\n  rescan: 0\n  artifacts: 1s\n  verify: 0\n"
        )
    )
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env |= {"TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    script = Path(__file__).resolve().parents[1] / "support" / "hf_runs.py"
    run = ws.root / "live"
    done = subprocess.run(
        [sys.executable, str(script), "--live-trainer", str(run)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    trained = json.loads(done.stdout.splitlines()[-1])
    assert all(w >= 0 for w in trained["waited"].values()), (trained, daemon.log)
    assert sorted(trained["waited"]) == ["2", "4", "6"], trained
    out = run / "out"
    assert trained["left"] == sorted(
        ["checkpoint-4", "checkpoint-6", "inference-2", "inference-2.md", "inference-4",
         "inference-4.md", "inference-6", "inference-6.md"]
    ), trained  # fmt: skip
    assert sorted(p.name for p in (out / "inference-2").iterdir()) == [
        MARKER, "config.json", "model.safetensors"
    ]  # fmt: skip

    def settled() -> bool:
        return _rows(ws).get("live/out/checkpoint-2", {}).get("status") == "removed"

    daemon.wait_until(settled, 60, "checkpoint-2 seen removed by the Trainer's rotation")
    assert daemon.stop() == 0
    rows = _rows(ws)
    assert set(rows) == {f"live/out/checkpoint-{n}" for n in (2, 4, 6)}, rows
    assert "save_total_limit" in rows["live/out/checkpoint-2"]["reason"]
