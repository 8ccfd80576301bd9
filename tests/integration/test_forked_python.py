"""The suite's TensorFlow programs forked from the pre-imported zygote (support/forked_python.py)
behave as `python SCRIPT` / `python -c CODE` would: argv, working folder, environment, stdin,
stdout and stderr apart, exit codes and signals, their own pid, fresh random numbers, a
timeout that kills; and a fresh interpreter runs what cannot be forked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import forked_python

PROBE = (
    "import json, os, random, sys\n"
    "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'pid': os.getpid(),\n"
    "    'probe': os.environ.get('PROBE'), 'stdin': sys.stdin.read(),\n"
    "    'random': random.random(), 'tf': 'tensorflow' in sys.modules,\n"
    "    'path0': sys.path[0]}))\n"
    "print('to stderr', file=sys.stderr)\n"
    "sys.exit(int(sys.argv[1]))\n"
)
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow", "PROBE": "x"}


def test_a_forked_program_sees_what_a_new_interpreter_would(tmp_path: Path) -> None:
    runs = [
        forked_python.run([sys.executable, "-c", PROBE, str(code), "a b"], env=ENV, cwd=tmp_path)
        for code in (0, 3)
    ]
    fresh = subprocess.run(
        [sys.executable, "-c", PROBE, "0", "a b"],
        env=ENV,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    docs = [json.loads(done.stdout) for done in runs]
    expected = json.loads(fresh.stdout)
    assert [done.returncode for done in runs] == [0, 3]
    assert [done.stderr for done in runs] == [fresh.stderr] * 2 == ["to stderr\n"] * 2
    for doc in docs:
        assert doc["argv"] == ["-c", doc["argv"][1], "a b"] and expected["argv"][2] == "a b"
        assert (doc["cwd"], doc["probe"], doc["stdin"], doc["path0"]) == (
            str(tmp_path),
            "x",
            "",
            expected["path0"],
        )
        assert doc["tf"] is True  # the point: TensorFlow is already there
    assert expected["tf"] is False
    assert docs[0]["pid"] != docs[1]["pid"] != os.getpid()
    assert docs[0]["random"] != docs[1]["random"]  # each fork seeded anew


def test_a_script_runs_as_main_with_its_folder_first_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 42\n")
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, helper_mod\n"
        "print(__name__, helper_mod.VALUE, sys.argv[1:], __file__)\n"
        "raise SystemExit('said on stderr')\n"
    )
    done = forked_python.run([sys.executable, str(script), "x"], env=ENV)
    assert done.stdout == f"__main__ 42 ['x'] {script}\n"
    assert (done.returncode, done.stderr) == (1, "said on stderr\n")


def test_popen_pipes_kills_and_times_out(tmp_path: Path) -> None:
    sleeper = "import os, sys, time; print(os.getpid(), flush=True); time.sleep(60)"
    proc = forked_python.popen(
        [sys.executable, "-c", sleeper], env=ENV, stdout=subprocess.PIPE, text=True
    )
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.5)
    assert proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forked_python.run([sys.executable, "-c", sleeper], env=ENV, timeout=1)
    assert time.monotonic() - started < 30
    joined = forked_python.popen(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, err = joined.communicate(timeout=120)
    assert (sorted(out.splitlines()), err, joined.returncode) == (["err", "out"], None, 0)


def test_what_cannot_be_forked_runs_in_a_fresh_interpreter(tmp_path: Path) -> None:
    done = forked_python.run([sys.executable, "-m", "json.tool"], env=ENV, input='{"a": 1}')
    assert (done.returncode, json.loads(done.stdout)) == (0, {"a": 1})
    # stdout to /dev/null is not a stream the zygote is given: a new interpreter, no TensorFlow
    code = "import sys; sys.exit(3 if 'tensorflow' in sys.modules else 0)"
    elsewhere = forked_python.popen(
        [sys.executable, "-c", code], env=ENV, stdout=subprocess.DEVNULL
    )
    assert elsewhere.wait(timeout=120) == 0
    forked = forked_python.popen([sys.executable, "-c", code], env=ENV)
    assert forked.wait(timeout=120) == (0 if forked_python.FRESH else 3)
