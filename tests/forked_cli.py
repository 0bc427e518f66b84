"""The admin commands (`mcpauth users|resources|clients|idps|keys|audit|db ...`) that tests run
hundreds of times, each in a process of its own forked from one that has already imported
mcpauth, instead of a new interpreter importing it all again (about a second of CPU each).

The forked process is a real one: its own pid, standard input, output and error on pipes, the
environment and working directory it is given, ``mcpauth.cli.main`` run as the console script
runs it, the exit status it ends with (an uncaught exception prints its traceback and exits 1,
as the interpreter does). What it does not repeat is the interpreter's start and the imports,
which tests of start-up itself still pay: every other command, and any command given a
different ``PYTHON*`` environment, is started with exec as before (``tests.support.run_cli``).

One forking server per test process (per pytest-xdist worker), started on first use on a Unix
socket in a private directory, dies with the test process (parent-death signal). Each command:
the test process sends the argument list, environment and directory with three pipe ends
(SCM_RIGHTS); the server forks, and the child puts the pipes on its file descriptors 0, 1 and 2,
answers its pid, runs the command and answers its exit status.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FORKED_COMMANDS = frozenset({"users", "resources", "clients", "idps", "keys", "audit", "db"})
_PR_SET_PDEATHSIG = 1
_HEADER = struct.Struct("!I")
_lock = threading.Lock()
_server: dict[str, Any] = {}


def forkable(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the command can run forked: an admin command, in the interpreter environment
    the server was started with."""
    if not args or args[0] not in FORKED_COMMANDS or os.environ.get("MCPAUTH_TEST_NO_FORK"):
        return False
    return _python(env) == _server.get("python", _python(os.environ))


def _python(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change how an interpreter starts or imports."""
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


def _socket_path() -> str:
    with _lock:
        process = _server.get("process")
        if process is None or process.poll() is not None:
            folder = tempfile.mkdtemp(prefix="mcpauth-forks-")
            path = os.path.join(folder, "server.sock")
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.forked_cli", path],
                cwd=Path(__file__).resolve().parents[1],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                preexec_fn=_die_with_parent,
            )
            assert process.stdout is not None
            ready = process.stdout.readline()  # after the imports
            if ready.strip() != b"ready":
                process.kill()
                raise RuntimeError(f"the forking server did not start: {ready!r}")
            _server.update(process=process, path=path, python=_python(os.environ))
            atexit.register(process.kill)
        return str(_server["path"])


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: str | None,
    cwd: str | Path | None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``mcpauth ARGS`` in a forked process, as ``subprocess.run(..., capture_output=True,
    text=True, timeout=timeout)`` would run it."""
    deadline = time.monotonic() + timeout
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    request = json.dumps(
        {"args": list(args), "env": dict(env), "cwd": str(cwd or os.getcwd())}
    ).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(_socket_path())
        socket.send_fds(conn, [_HEADER.pack(len(request))], [stdin_r, out_w, err_w])
        conn.sendall(request)
    finally:
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
    output: dict[int, bytes] = {}

    def drain(fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            output[fd] = pipe.read()

    readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
    for reader in readers:
        reader.start()
    with os.fdopen(stdin_w, "wb") as pipe, contextlib.suppress(BrokenPipeError):
        pipe.write((stdin or "").encode())
    with conn, conn.makefile("rb") as answers:
        pid = int(json.loads(answers.readline())["pid"])
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        if any(reader.is_alive() for reader in readers):  # still writing at the deadline
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(["mcpauth", *args], timeout)
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        line = answers.readline()  # the exit status, sent as the child's last act
        if not line:
            raise RuntimeError(f"mcpauth {' '.join(args)}: the forked process died unanswered")
        returncode = int(json.loads(line)["returncode"])
    return subprocess.CompletedProcess(
        ["mcpauth", *args], returncode, _text(output.get(out_r, b"")), _text(output.get(err_r, b""))
    )


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` decodes: universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the test process went away")
        data += chunk
    return data


def _child(conn: socket.socket) -> None:  # pragma: no cover - runs in the forked child
    """Run one command and exit with its status; never returns."""
    code = 1
    try:
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        request = json.loads(_recv_exactly(conn, _HEADER.unpack(header)[0]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        sys.argv = ["mcpauth", *request["args"]]
        from mcpauth.cli import main

        try:
            code = main(request["args"])
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        try:
            conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
        finally:
            os._exit(code)


def serve(path: str) -> None:  # pragma: no cover - the forking server's own process
    """Import what the admin commands use, say ready, then fork a child per connection."""
    import mcpauth.cli
    import mcpauth.server.admin
    import mcpauth.server.app

    mcpauth.cli.build_parser()  # every group's parser: the imports they make
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(conn)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
