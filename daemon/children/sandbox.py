"""The load child's sandbox: no network, and no write outside its own staging folder.

    python -m ckpt_daemon.children.sandbox require|warn FOLDER -- COMMAND...

A tiny launcher, started by the parent instead of the load probe itself: while it is still one
thread (unsharing a user namespace needs that, and torch or TensorFlow start threads when they
are imported), it confines itself and then `exec`s COMMAND, which inherits every layer:

1. a new user and network namespace (its uid mapped to itself): no capability outside it (a
   root parent's child cannot reboot, set the clock, load a module), and no network interface
   but a loopback that is down;
2. `no_new_privs`, and a seccomp filter that fails `socket(2)` and `io_uring_setup(2)` with
   EPERM: no socket of any family, a path-named Unix socket (`/run/docker.sock`) included,
   which neither namespaces nor Landlock keep it from;
3. Landlock: read and execute anywhere, write only beneath FOLDER (and `/dev/null`); with ABI 4,
   TCP bind and connect denied too; with ABI 6, no signal to, and no abstract Unix socket of,
   a process outside the sandbox.

Nobody's uid is needed: the child reads the interpreter wherever it lives (a private /root
pyenv, a venv in a 0700 home) as the parent could. Each layer comes from the kernel (x86_64 or
aarch64, Landlock ABI 3 or later: before it, truncating a file was not a write); none needs a
package. `require` (config `load_sandbox`, the default): a missing layer means the command is
not run: one JSON line {"unsandboxed": "why"} is printed instead. `warn`: it runs with what
there is, and `CKPT_LOAD_SANDBOX` tells the child what that was, to be printed with its result.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import struct
import sys

DESCRIPTION_ENV = "CKPT_LOAD_SANDBOX"
MODES = ("require", "warn")
CONFINED = "sandboxed: no network, writes only to its temp folder"
UNSANDBOXED = "NOT SANDBOXED"  # `load_sandbox: warn`, a layer missing: "NOT SANDBOXED (why)"
LANDLOCK_MIN_ABI = 3

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
# Per machine: (syscall numbers of landlock_create_ruleset, _add_rule, _restrict_self; the
# AUDIT_ARCH seccomp sees; syscalls failed with EPERM: socket, io_uring_setup (io_uring can
# open and connect sockets without calling socket(2)); whether x32 calls must be refused).
_MACHINES = {
    "x86_64": ((444, 445, 446), 0xC000003E, (41, 425), True),
    "aarch64": ((444, 445, 446), 0xC00000B7, (198, 425), False),
}

# Landlock's filesystem rights, bit by bit, as in <linux/landlock.h>; which ABI added each.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect
_SCOPES = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals
_RULE_PATH_BENEATH = 1
_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # packed in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _Unavailable(Exception):
    """A layer this kernel (or its configuration) does not give."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(what: str) -> _Unavailable:
    err = ctypes.get_errno()
    return _Unavailable(f"{what}: {os.strerror(err) if err else 'unsupported'}")


def _machine() -> tuple[tuple[int, int, int], int, tuple[int, ...], bool]:
    found = _MACHINES.get(platform.machine())
    if found is None:
        raise _Unavailable(f"no sandbox on {platform.machine()} (x86_64 and aarch64 only)")
    return found


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or turned off at boot)."""
    try:
        (create, _, _), *_ = _machine()
    except _Unavailable:
        return 0
    version = _libc().syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _namespaces() -> None:
    """A user namespace of our own (our uid and gid mapped to themselves) and a network
    namespace in it."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc().unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        why = _USERNS_ERRORS.get(err, os.strerror(err))
        raise _Unavailable(f"no user and network namespace: {why}")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


_USERNS_ERRORS = {
    errno.ENOSPC: "the user.max_user_namespaces limit is reached (0: turned off)",
    errno.EPERM: "not permitted (kernel.unprivileged_userns_clone, or an AppArmor rule)",
    errno.EINVAL: "not one thread (a bug: the launcher must run first)",
}


def _no_new_privs() -> None:
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("no_new_privs")


def _seccomp() -> None:
    """A seccomp filter: the syscalls named in `_MACHINES` fail with EPERM (so do calls of
    another ABI: 32-bit, x32), every other one is allowed."""
    _, arch, denied, x32 = _machine()
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    checks = [(jge, 0x40000000)] if x32 else []
    checks += [(jeq, nr) for nr in denied]
    n = len(checks)
    # [load arch, arch?, load nr, checks..., allow, deny]: jumps count from the next one.
    program = [(ld, 0, 0, 4), (jeq, 0, n + 2, arch), (ld, 0, 0, 0)]
    program += [(code, n - i, 0, k) for i, (code, k) in enumerate(checks)]
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog_buffer, 0, 0) != 0:
        raise _fail("seccomp filter")


def _landlock(folder: str, abi: int) -> None:
    """Read and execute anywhere; every write right beneath `folder` (and on /dev/null)."""
    if abi < LANDLOCK_MIN_ABI:
        raise _Unavailable(
            f"Landlock ABI {abi} (needs {LANDLOCK_MIN_ABI}: Linux 6.2 or later, "
            "`lsm=...,landlock` at boot)"
        )
    (create, add_rule, restrict), *_ = _machine()
    fs = _FS_ABI1 | _FS_REFER | _FS_TRUNCATE | (_FS_IOCTL_DEV if abi >= 5 else 0)
    attr = struct.pack("QQQ", fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    libc = _libc()
    ruleset = libc.syscall(create, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _fail("Landlock ruleset")
    try:
        file_rights = _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
        for path, rights in ((os.sep, _READ), (folder, fs), ("/dev/null", file_rights)):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    raise _fail(f"Landlock rule for {path}")
            finally:
                os.close(fd)
        if libc.syscall(restrict, ruleset, 0) != 0:
            raise _fail("Landlock")
    finally:
        os.close(ruleset)


def confine(folder: str) -> list[str]:
    """Every layer this kernel gives, in order; what was missing (empty: fully confined)."""
    missing = []
    for layer in (_namespaces, _no_new_privs, _seccomp, lambda: _landlock(folder, landlock_abi())):
        try:
            layer()
        except (_Unavailable, OSError) as exc:
            missing.append(str(exc))
    return missing


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] not in MODES or argv[2] != "--":
        print(
            "usage: python -m ckpt_daemon.children.sandbox require|warn FOLDER -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    mode, folder, cmd = argv[0], argv[1], argv[3:]
    missing = confine(folder)
    if missing and mode == "require":
        print(json.dumps({"unsandboxed": "; ".join(missing)}))
        return 0
    os.environ[DESCRIPTION_ENV] = f"{UNSANDBOXED} ({'; '.join(missing)})" if missing else CONFINED
    os.execv(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
