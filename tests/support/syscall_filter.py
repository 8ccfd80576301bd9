"""A systemd unit's `SystemCallFilter=` deny list, emulated with a real seccomp filter.

systemd cannot run here (it is not PID 1), so a command is run as the unit would run it: this
module, run as a program, installs a seccomp filter with libseccomp (through ctypes; Debian's
libseccomp2, which systemd itself uses) and then execs the command, which inherits the filter
with every process it starts. Only the unit's deny lists (`~@group ...`) and what later lines
allow back are emulated, with the unit's action: SIGSYS kills the process, as systemd does,
unless `SystemCallErrorNumber=` names an errno. The allow list (`@system-service`) is not
emulated: it does not hold the calls that these tests are about.

    python -m tests.support.syscall_filter --errno EPERM --deny setpriority,nice -- CMD...
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ERRNO = 0x00050000


@dataclass(frozen=True)
class SyscallFilter:
    denied: frozenset[str]
    errno_name: str | None  # None: the process is killed (SIGSYS)

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run under this filter."""
        action = ["--errno", self.errno_name] if self.errno_name else []
        deny = ",".join(sorted(self.denied))
        return [
            sys.executable,
            "-m",
            "tests.support.syscall_filter",
            *action,
            "--deny",
            deny,
            "--",
            *argv,
        ]


def group(name: str) -> set[str]:
    """The system calls of a systemd group (`@resources`), nested groups expanded, as the
    installed systemd lists them."""
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze not found: apt-get install systemd"
    listed = subprocess.run([tool, "syscall-filter", name], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    calls: set[str] = set()
    for line in listed.stdout.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        calls |= group(word) if word.startswith("@") else {word}
    return calls


def names(words: str) -> set[str]:
    found: set[str] = set()
    for word in words.split():
        found |= group(word) if word.startswith("@") else {word}
    return found


def of_unit(unit: Path) -> SyscallFilter:
    """The filter a unit file's `SystemCallFilter=` and `SystemCallErrorNumber=` lines make
    (systemd's merging: the first line sets the kind; later `~` lines deny, later plain lines
    allow back what was denied)."""
    denied: set[str] = set()
    errno_name = None
    first = True
    for raw in unit.read_text().splitlines():
        key, _, value = raw.strip().partition("=")
        if key == "SystemCallErrorNumber":
            errno_name = value.strip() or None
        if key != "SystemCallFilter":
            continue
        if value.startswith("~"):
            denied |= names(value[1:])
        elif not first:
            denied -= names(value)
        first = False
    return SyscallFilter(frozenset(denied), errno_name)


def install(denied: list[str], errno_name: str | None) -> None:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    action = SCMP_ACT_ERRNO | getattr(errno, errno_name) if errno_name else SCMP_ACT_KILL_PROCESS
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    assert context, "seccomp_init failed"
    for name in denied:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a call of this architecture (setuid32 on x86-64)
            continue
        assert lib.seccomp_rule_add(context, action, number, 0) == 0, name
    assert lib.seccomp_load(context) == 0, "seccomp_load failed"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--errno", dest="errno_name")
    parser.add_argument("--deny", required=True)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    install([n for n in args.deny.split(",") if n], args.errno_name)
    os.execvp(args.command[0], args.command)


if __name__ == "__main__":
    main()
