"""The zygote's server (run as `python -c <this file's text> ADDRESS REPO PROGRAM` by
`forked_cli._Zygote`): imports what PROGRAM names once ("cli": the `ckpt_daemon` package; else a
comma-separated module list, e.g. TensorFlow and Keras), then for each connection on the Unix
socket ADDRESS forks a waiter, which forks the program with the request's argv, environment,
working folder and stdin/stdout/stderr (passed as file descriptors), sends its pid, waits for
it and sends how it ended. Never imported: its text is the program."""

import contextlib
import ctypes
import importlib
import io
import json
import os
import pkgutil
import signal
import socket
import struct
import sys
import traceback

address, repo, program = sys.argv[1], sys.argv[2], sys.argv[3]
ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: go when the tests go
if program == "cli":
    import ckpt_daemon
    from ckpt_daemon.cli import main as cli_main

    for info in pkgutil.walk_packages(ckpt_daemon.__path__, "ckpt_daemon."):
        # `migrations` (inside the package where it is installed from a wheel) holds Alembic's
        # scripts, which run only under Alembic's context.
        skipped = ("ckpt_daemon.children", "ckpt_daemon.__main__", "ckpt_daemon.migrations")
        if not info.name.startswith(skipped):
            importlib.import_module(info.name)
    # Alembic too: most tests' first command makes a new catalog, which Alembic migrates (its
    # import is 0.3 s of CPU here, in every fork). What a command imports is checked in fresh
    # interpreters (tests/README.md), never in a fork.
    for name in ("alembic.command", "alembic.config", "alembic.runtime.migration"):
        importlib.import_module(name)

    def run(args):
        sys.argv = [os.path.join(repo, "daemon", "__main__.py"), *args]
        cli_main.main(args)
else:
    import random
    import runpy

    for name in program.split(","):
        importlib.import_module(name)

    def run(args):
        # What `python ARGS` does: a script, or -c CODE; randomness seeded anew, as in a
        # new interpreter (every fork would otherwise draw the zygote's same numbers).
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            sys.path[0] = ""
            code = compile(args[1], "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")


signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(address + ".new")
listener.listen(64)
os.rename(address + ".new", address)
HEADER = struct.Struct("!I")


def receive(conn):
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack(data[:4])[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    return json.loads(data[HEADER.size :]), fds


def command(request, fds):
    # In the forked command: what `python -m ckpt_daemon ARGS` starts with.
    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import time

    time.tzset()
    encoding = sys.stdout.encoding

    def stream(fd, mode, errors, line_buffering):
        buffered = open(fd, mode + "b", closefd=False)  # noqa: SIM115 (the process's stream)
        return io.TextIOWrapper(buffered, encoding, errors, line_buffering=line_buffering)

    sys.stdin = sys.__stdin__ = stream(0, "r", "strict", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", "strict", os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", "backslashreplace", True)
    code = 0
    try:
        run(request["args"])
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    import atexit
    import threading

    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    except Exception:
        code = 120
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code & 0xFF)


def waiter(conn, request, fds):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # A command asked to lead a session of its own (Popen's start_new_session) has one before
    # its pid is sent: a caller may kill its process group at once.
    grouped, in_group = os.pipe()
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.close(grouped)
        try:
            if request.get("session"):
                os.setsid()
            os.close(in_group)
            command(request, fds)
        except BaseException:
            traceback.print_exc()
            os._exit(70)
    os.close(in_group)
    os.read(grouped, 1)  # end of file: the child is in its group (or gone)
    os.close(grouped)
    for fd in fds:
        os.close(fd)
    conn.sendall(b"%d\n" % pid)
    _, status = os.waitpid(pid, 0)
    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
    os._exit(0)


while True:
    conn, _ = listener.accept()
    try:
        request, fds = receive(conn)
    except Exception:
        conn.close()
        continue
    if os.fork() == 0:
        listener.close()
        try:
            waiter(conn, request, fds)
        finally:
            os._exit(1)
    conn.close()
    for fd in fds:
        os.close(fd)
