"""Every file in a root is hostile until read safely (issue 8: items 6, 7, 9, 13, 14, 15, 20).

Real hostile files built here (tests/support/hostile_files.py), the real CLI and daemon as
subprocesses.
Reads outside the roots are observed with inotify (`OpenWatch`), never assumed; link targets
outside are FIFOs, whose open would block the reader for good.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace, service_workspace
from tests.support import hostile_files as hf
from tests.support.forked_cli import ckpt_process

H5_CKPT = "tfk/run_h5/weights.01-1.69.hdf5"
HANG_SECONDS = 120  # far above what any of these reads needs; a hang is a failure, not a wait


def ckpt(
    ws: Workspace, *args: str, timeout: float = HANG_SECONDS, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    cmd = [*prefix, sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), *args]
    try:
        if not prefix:
            return ckpt_process(cmd[3:], timeout=timeout, cwd=ws.base)
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=ws.base, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`ckpt {' '.join(args)}` hung for {timeout} s")


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    listed = json.loads(ckpt(ws, "list", "--json").stdout)
    return {Path(r["path"]).name: r for r in listed}


def show(ws: Workspace, path: Path) -> dict[str, Any]:
    result = ckpt(ws, "show", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outside")


def run_folder(ws: Workspace, name: str = "run") -> Path:
    folder = ws.root / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ---- item 6: an external link to a FIFO blocks nothing ----


def test_external_link_to_a_fifo_blocks_neither_scan_nor_serve_once(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    path = hf.external_link_to_fifo(run_folder(ws), outside)
    scanned = ckpt(ws, "scan", "--json")
    assert scanned.returncode == 0, scanned.stderr
    row = rows(ws)[path.name]
    assert row["status"] == "ok"
    assert any("outside the file" in note for note in show(ws, path)["notes"])
    once = ckpt(ws, "serve", "--once")
    assert once.returncode == 0, once.stderr


def test_a_live_daemon_indexes_past_a_fifo_link_and_a_deep_file(
    tmp_path: Path, outside: Path, keras_checkpoints: Path
) -> None:
    ws = service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    run = run_folder(ws)
    fifo_linked = hf.external_link_to_fifo(run, outside)
    deep = hf.deep_nesting(run, outside)
    daemon.wait_until(
        lambda: {fifo_linked.name, deep.name} <= set(rows(ws)), HANG_SECONDS, "both indexed"
    )
    shutil.copy2(keras_checkpoints / H5_CKPT, run / "normal.h5")
    daemon.wait_until(
        lambda: rows(ws).get("normal.h5", {}).get("status") == "ok", HANG_SECONDS, "normal.h5"
    )
    # The deep file is `incomplete` until it has settled, then `corrupt`: a fast `ckpt list`
    # may look before that, whichever file the daemon finished first.
    daemon.wait_until(
        lambda: rows(ws)[deep.name]["status"] != "incomplete", HANG_SECONDS, "deep settled"
    )
    found = rows(ws)
    assert found[fifo_linked.name]["status"] == "ok"
    assert found[deep.name]["status"] == "corrupt" and "nested" in found[deep.name]["reason"]
    assert daemon.stop() == 0, daemon.log


# ---- item 13: external links, external storage, virtual datasets: never resolved ----


def test_outside_references_are_noted_never_read_and_never_rewritten(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    run = run_folder(ws)
    built = [
        hf.external_link_outside(run, outside),
        hf.external_storage(run, outside),
        hf.virtual_dataset(run, outside),
    ]
    before = {p: p.read_bytes() for p in built}
    with hf.OpenWatch(outside) as watch:
        assert ckpt(ws, "scan").returncode == 0
        for path in built:
            assert rows(ws)[path.name]["status"] == "ok"
            notes = show(ws, path)["notes"]
            assert any("outside the file" in n for n in notes), (path.name, notes)
        for path in built:
            for verb in ("compress", "split"):
                result = ckpt(ws, verb, str(path))
                assert result.returncode != 0 and "outside" in result.stderr, result
        ckpt(ws, "serve", "--once")
    assert watch.opened == []  # not one open of a file outside the root
    assert {p: p.read_bytes() for p in built} == before


# ---- item 7: a file that crashes or floods libhdf5 takes nothing down ----


def test_deeply_nested_groups_are_refused_quickly_not_crashed_on(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    path = hf.deep_nesting(run_folder(ws), outside)
    scanned = ckpt(ws, "scan", "--json")
    assert scanned.returncode == 3, scanned.stderr
    row = rows(ws)[path.name]
    assert row["status"] == "corrupt" and "nested deeper than" in row["reason"]


def _reader_child(daemon_pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(next(ln for ln in status.splitlines() if ln.startswith("PPid:")).split()[1])
        if ppid == daemon_pid and b"ckpt_daemon.children.reader_child" in cmdline:
            return int(entry.name)
    return None


def _request_pending(pid: int) -> bool:
    """Whether the daemon has written a request the (stopped) reader has not taken yet: the
    bytes waiting in its stdin pipe, read through another reader end (FIONREAD, not consumed)."""
    import fcntl
    import struct
    import termios

    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        waiting = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
        return struct.unpack("i", waiting)[0] > 0
    finally:
        os.close(fd)


def test_a_reader_that_crashes_or_hangs_mid_read_leaves_the_daemon_running(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """The reader child is crashed (SIGSEGV, as libhdf5 does on 20,000 nested groups) and then
    hung (SIGSTOP, as a read stuck on a dead NFS server) in the middle of reading a file: the
    daemon records that file corrupt with the reason, replaces its reader, and goes on."""
    import signal

    # The hang is cut by completion.read_timeout: 10 s, a third of the default (a child's start
    # and a sound read of this file take about a second here, several under load).
    ws = service_workspace(tmp_path)
    config = ws.config.read_text()
    ws.config.write_text(config.replace("completion:\n", "completion:\n  read_timeout: 10s\n", 1))
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    run = run_folder(ws)

    def place(name: str) -> None:  # an old mtime: settled at once, so a failure is final
        shutil.copy2(keras_checkpoints / H5_CKPT, run / name)

    def status(name: str) -> dict[str, Any]:
        return dict(rows(ws).get(name, {}))

    for victim, how in (("crashed.h5", signal.SIGSEGV), ("hung.h5", None)):
        before = f"before_{victim}"
        place(before)  # read by a (new) reader child, which then stays
        daemon.wait_until(lambda b=before: status(b).get("status") == "ok", HANG_SECONDS, before)
        reader = _reader_child(daemon.proc.pid)
        assert reader is not None, "the daemon keeps its reader child between files"
        os.kill(reader, signal.SIGSTOP)
        place(victim)
        daemon.wait_until(lambda r=reader: _request_pending(r), HANG_SECONDS, "the request")
        if how is not None:
            os.kill(reader, how)  # delivered when it runs again
            os.kill(reader, signal.SIGCONT)
        daemon.wait_until(
            lambda v=victim: status(v).get("status") == "corrupt", HANG_SECONDS, victim
        )
        assert _reader_child(daemon.proc.pid) != reader  # killed, replaced at the next read
    assert "reader crashed (SIGSEGV)" in status("crashed.h5")["reason"]
    assert "read timed out after 10 s" in status("hung.h5")["reason"]
    place("after.h5")
    daemon.wait_until(lambda: status("after.h5").get("status") == "ok", HANG_SECONDS, "after")
    assert daemon.stop() == 0, daemon.log


# ---- item 9: zip bombs ----


def _scan_measured(ws: Workspace, file_limit: int) -> tuple[subprocess.CompletedProcess[str], int]:
    """`ckpt scan` under RLIMIT_FSIZE (a temp file bigger than `file_limit` kills it), and the
    peak RSS in bytes of it and its children (the reader), measured by a wrapper process."""
    wrapper = (
        "import resource, subprocess, sys\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_limit}, {file_limit}))\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(done.stdout)\n"
        "sys.stderr.write(done.stderr + f'\\nEXIT {done.returncode}\\n')\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    )
    cmd = [sys.executable, "-c", wrapper, sys.executable, "-m", "ckpt_daemon"]
    result = subprocess.run(
        [*cmd, "--config", str(ws.config), "scan", "--json"],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        cwd=ws.base,
    )
    lines = result.stderr.strip().splitlines()
    code = int(lines[-2].split()[1])
    return (
        subprocess.CompletedProcess(result.args, code, result.stdout, result.stderr),
        int(lines[-1]) * 1024,
    )


def test_zip_bombs_are_refused_with_bounded_memory_and_no_temp_files(
    workspace: Workspace, outside: Path, keras_checkpoints: Path
) -> None:
    ws = workspace
    run = run_folder(ws)
    bombs = [hf.zip_bomb_config(run, outside), hf.zip_bomb_weights(run, outside)]
    legal = hf.deflated_inner_weights(run, outside)
    shutil.copy2(keras_checkpoints / H5_CKPT, run / "normal.h5")
    result, peak_rss = _scan_measured(ws, file_limit=64 << 20)
    assert result.returncode == 3, result.stderr  # not killed by SIGXFSZ: no big temp file
    assert peak_rss < 400 << 20, peak_rss
    found = rows(ws)
    refusals = ("config.json in the archive declares", "zip bomb")
    for bomb, refusal in zip(bombs, refusals, strict=True):
        row = found[bomb.name]
        assert row["status"] == "corrupt" and refusal in row["reason"], row
        assert "File too large" not in row["reason"]  # no write hit the RLIMIT_FSIZE
    assert found[legal.name]["status"] == "ok"
    assert found["normal.h5"]["status"] == "ok"


def test_an_archive_listing_100k_members_is_refused_unread(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    path = hf.zip_many_members(run_folder(ws), outside)
    assert ckpt(ws, "scan").returncode == 3
    row = rows(ws)[path.name]
    assert row["status"] == "corrupt" and "100000 members" in row["reason"]


# ---- item 14: symlinked metrics files are never read ----


def test_symlinked_metrics_files_contribute_nothing(
    workspace: Workspace, outside: Path, keras_checkpoints: Path
) -> None:
    ws = workspace
    run = run_folder(ws)
    ckpt_path = run / "weights.01-1.69.hdf5"
    shutil.copy2(keras_checkpoints / H5_CKPT, ckpt_path)
    (outside / "secret.log").write_text("epoch,secret_metric\n0,42.0\n")
    (outside / "secret.json").write_text('{"sidecar_secret": 7.0}')
    (run / "training.log").symlink_to(outside / "secret.log")
    (run / "more.csv").symlink_to(outside / "secret.log")
    Path(f"{ckpt_path}.json").symlink_to(outside / "secret.json")
    with hf.OpenWatch(outside) as watch:
        assert ckpt(ws, "scan").returncode == 0
        shown = show(ws, ckpt_path)
    assert watch.opened == []
    assert "secret_metric" not in shown["metrics"] and "sidecar_secret" not in shown["metrics"]
    assert any("symlink" in note for note in shown["notes"]), shown["notes"]


# ---- item 15: a scan target reached through a symlinked folder ----


def test_a_scan_target_through_a_symlinked_folder_is_refused(
    workspace: Workspace, outside: Path, keras_checkpoints: Path
) -> None:
    ws = workspace
    (outside / "secret").mkdir()
    shutil.copy2(keras_checkpoints / H5_CKPT, outside / "secret" / "model.h5")
    (ws.root / "linked").symlink_to(outside / "secret", target_is_directory=True)
    with hf.OpenWatch(outside) as watch:
        result = ckpt(ws, "scan", str(ws.root / "linked" / "model.h5"), "--json")
    assert watch.opened == []
    report = json.loads(result.stdout)
    assert report["indexed"] == []
    (skipped,) = report["skipped"]
    assert "symlink" in skipped["reason"]
    assert rows(ws) == {}


# ---- item 20: an unreadable folder is unreadable, not missing ----


def _scan_without_dac_override(ws: Workspace) -> subprocess.CompletedProcess[str]:
    # Tests run as root, who reads anything: drop the capabilities that bypass permissions.
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    return ckpt(ws, "scan", "--json", prefix=prefix if os.geteuid() == 0 else ())


def test_a_folder_that_becomes_unreadable_marks_its_checkpoints_unreadable(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    ws = workspace
    run = run_folder(ws)
    shutil.copy2(keras_checkpoints / H5_CKPT, run / "a.h5")
    assert ckpt(ws, "scan").returncode == 0
    run.chmod(0o000)
    try:
        result = _scan_without_dac_override(ws)
    finally:
        run.chmod(0o755)
    assert result.returncode == 3, result.stderr
    row = rows(ws)["a.h5"]
    assert row["status"] == "unreadable" and "folder unreadable" in row["reason"], row
    assert _scan_without_dac_override(ws).returncode == 0  # readable again: ok again
    assert rows(ws)["a.h5"]["status"] == "ok"


# ---- special files, and a file swapped for a symlink after it was indexed ----


def test_a_checkpoint_replaced_by_a_symlink_is_not_followed_by_verify(
    workspace: Workspace, outside: Path, keras_checkpoints: Path
) -> None:
    ws = workspace
    target = run_folder(ws) / "a.h5"
    shutil.copy2(keras_checkpoints / H5_CKPT, target)
    assert ckpt(ws, "scan").returncode == 0
    shutil.copy2(target, outside / "same_bytes.h5")
    target.unlink()
    target.symlink_to(outside / "same_bytes.h5")
    with hf.OpenWatch(outside) as watch:
        result = ckpt(ws, "verify", str(target))
    assert watch.opened == []
    assert result.returncode != 0, result.stdout


# ---- the whole corpus through `ckpt scan`: every file recorded with a reason ----


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ws = Workspace(tmp_path_factory.mktemp("corpus"))
    outside = tmp_path_factory.mktemp("corpus_outside")
    built = hf.build_corpus(ws.root, outside, slow=False)
    with hf.OpenWatch(outside) as watch:
        scanned = ckpt(ws, "scan", "--json", timeout=300)
    return {
        "ws": ws,
        "built": built,
        "scan": scanned,
        "report": json.loads(scanned.stdout),
        "rows": {r["path"]: r for r in json.loads(ckpt(ws, "list", "--json").stdout)},
        "opened": watch.opened,
    }


@pytest.mark.parametrize("kind", [k for k, v in hf.KINDS.items() if not v.slow])
def test_every_hostile_kind_is_recorded_with_a_reason(corpus: dict[str, Any], kind: str) -> None:
    expected = hf.KINDS[kind]
    assert corpus["scan"].returncode == 3, corpus["scan"].stderr
    assert corpus["opened"] == []
    path = corpus["built"][kind]
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    if expected.expect == "skipped":
        reasons = [s["reason"] for s in corpus["report"]["skipped"] if s["path"] == text]
        assert reasons and all(reasons), corpus["report"]["skipped"]
        assert expected.reason.lower() in reasons[0].lower()
        return
    row = corpus["rows"][text]
    assert row["status"] == expected.expect, row
    if expected.expect != "ok":
        assert row["reason"] and expected.reason.lower() in row["reason"].lower(), row


def test_after_the_corpus_a_normal_checkpoint_still_indexes(
    corpus: dict[str, Any], keras_checkpoints: Path
) -> None:
    ws = corpus["ws"]
    target = ws.root / "normal" / "weights.01-1.69.hdf5"
    target.parent.mkdir()
    shutil.copy2(keras_checkpoints / H5_CKPT, target)
    result = ckpt(ws, "scan", str(target), "--json")
    assert json.loads(result.stdout)["indexed"] == [str(target)]


# ---- siblings: a SavedModel is a folder of files: a link anywhere in it is refused ----


def test_a_savedmodel_with_a_symlinked_member_is_not_read(
    workspace: Workspace, outside: Path, keras_checkpoints: Path
) -> None:
    """A SavedModel is read member by member: a link among them is refused, not followed."""
    ws = workspace
    folder = ws.root / "export" / "sm"
    shutil.copytree(keras_checkpoints / "k3/export/sm", folder)
    member = next((folder / "variables").glob("variables.data-*"))
    shutil.move(member, outside / member.name)
    member.symlink_to(outside / member.name)
    with hf.OpenWatch(outside) as watch:
        ckpt(ws, "scan", timeout=300)
    assert watch.opened == []
    row = rows(ws)["sm"]
    assert row["status"] == "unreadable" and "symlink" in row["reason"], row
