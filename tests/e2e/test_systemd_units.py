"""The shipped systemd units: `systemd-analyze verify` prints nothing, hardening stays high.

systemd-analyze runs without systemd as PID 1 (Debian's `systemd` package). ExecStart must
name an existing executable for verify to pass, so each unit is checked with its `ckpt` path
pointed at the one installed for these tests, exactly as docs/service.md tells users to adjust it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
# `systemd-analyze security --offline=yes` exposure of the system unit: 1.7 of 10 when recorded
# (systemd 252; --threshold counts tenths, so 20 = 2.0). Raise it only with a reason.
SECURITY_THRESHOLD = 20


def installed(unit: Path, tmp_path: Path, placeholder: str) -> Path:
    ckpt = shutil.which("ckpt")
    assert ckpt, "the ckpt console script is not installed (pip install -e .)"
    target = tmp_path / "ckpt-daemon.service"
    text = unit.read_text()
    assert placeholder in text
    target.write_text(text.replace(placeholder, ckpt))
    return target


def analyze(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze not found: apt-get install systemd"
    return subprocess.run(
        [tool, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_system_unit_verifies_cleanly(tmp_path: Path) -> None:
    unit = installed(UNITS / "ckpt-daemon.service", tmp_path, "/usr/local/bin/ckpt")
    result = analyze("verify", str(unit))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_user_unit_verifies_cleanly(tmp_path: Path) -> None:
    unit = installed(UNITS / "user" / "ckpt-daemon.service", tmp_path, "%h/.local/bin/ckpt")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    result = analyze("--user", "verify", str(unit), env={"XDG_RUNTIME_DIR": str(runtime)})
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_system_unit_hardening_stays_under_the_threshold(tmp_path: Path) -> None:
    unit = installed(UNITS / "ckpt-daemon.service", tmp_path, "/usr/local/bin/ckpt")
    result = analyze("security", "--offline=yes", f"--threshold={SECURITY_THRESHOLD}", str(unit))
    assert result.returncode == 0, result.stdout[-2000:]
    assert "Overall exposure level" in result.stdout


@pytest.mark.parametrize("unit", ["ckpt-daemon.service", "user/ckpt-daemon.service"])
def test_units_match_what_the_daemon_does(unit: str) -> None:
    text = (UNITS / unit).read_text()
    for line in (
        "Type=notify",
        "RestartPreventExitStatus=2",
        "WatchdogSec=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        " serve",
    ):
        assert line in text, (unit, line)
