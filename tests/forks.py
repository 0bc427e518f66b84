"""Python processes the tests start by the hundred (`mcpauth users add ...`, `mcpauth serve`,
the example servers), each forked from one process that has already imported mcpauth, instead
of a new interpreter importing it all again (about a second of CPU each).

A forked process is a real one: its own pid and process group, its standard input, output and
error where it is told (pipes, a log file), the environment and working directory it is given,
the program run as the interpreter runs it (``mcpauth.cli.main`` as the console script does,
a script or ``-m`` module as ``__main__``), signals delivered to it, and the exit status it ends
with (an uncaught exception prints its traceback and exits 1; a signal gives ``-N``, as
``subprocess`` reports it). What it does not repeat is the interpreter's start and the imports,
which tests of start-up itself still pay: anything not named by :func:`forkable`, and any
command given a different ``PYTHON*`` environment, is started with exec as before.

One forking server per test process (per pytest-xdist worker), started on first use on a Unix
socket in a private directory, dies with the test process (parent-death signal). Per process:
the test process sends the program, environment and directory with the file descriptors it is
to have (SCM_RIGHTS); the server forks, the child puts them in place, answers its pid and runs
the program; the server, which reaps it, answers its exit status on the same connection.

Programs that another program starts (the conformance suite starts its client once per
scenario, about eighty times) are forked the same way from a server of their own that has also
imported what they use (:func:`server`): the command that program is given is a launcher,
``python -S tests/forks.py launch PATH -m module ...`` (:func:`launch`), which starts in a few
milliseconds, hands its own streams, environment and directory to the forked child, passes on
the signals it gets and ends with the child's status.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MCPAUTH = str(Path(sys.executable).parent / "mcpauth")
# the admin commands (short) and the servers (until stopped) of the `mcpauth` command
FORKED_COMMANDS = frozenset(
    {"users", "resources", "clients", "idps", "keys", "audit", "db", "serve", "proxy"}
)
_PR_SET_PDEATHSIG = 1
_HEADER = struct.Struct("!I")
_lock = threading.Lock()
_server: dict[str, Any] = {}


def _python(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change how an interpreter starts or imports."""
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


def program_of(args: Sequence[str]) -> list[str] | None:
    """What a forked child runs for ``args`` (``["mcpauth", ...]``, ``["-m", module, ...]`` or
    ``[script, ...]``), or None when ``args`` is not a program this interpreter runs."""
    if not args:
        return None
    if args[0] == MCPAUTH and len(args) > 1 and args[1] in FORKED_COMMANDS:
        return ["mcpauth", *args[1:]]
    if args[0] != sys.executable or len(args) < 2:
        return None
    if args[1] == "-m" and len(args) > 2:
        return list(args[1:])
    if args[1].endswith(".py") and not args[1].startswith("-"):
        return list(args[1:])
    return None


def forkable(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether ``args`` can run forked: a program of this interpreter, started in the
    interpreter environment the forking server was started with."""
    if program_of(args) is None or os.environ.get("MCPAUTH_TEST_NO_FORK"):
        return False
    return _python(env) == _server.get("python", _python(os.environ))


def _start(path: str, preload: Sequence[str], *, new_session: bool) -> subprocess.Popen[bytes]:
    """A forking server listening on ``path``, once it has imported what its programs use."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.forks", path, *preload],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        preexec_fn=None if new_session else _die_with_parent,
        start_new_session=new_session,
    )
    assert process.stdout is not None
    ready = process.stdout.readline()  # after the imports
    if ready.strip() != b"ready":
        process.kill()
        raise RuntimeError(f"the forking server did not start: {ready!r}")
    return process


def _socket_path() -> str:
    with _lock:
        process = _server.get("process")
        if process is None or process.poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="mcpauth-forks-"), "server.sock")
            process = _start(path, (), new_session=False)
            _server.update(process=process, path=path, python=_python(os.environ))
            atexit.register(process.kill)
        return str(_server["path"])


@contextlib.contextmanager
def server(preload: Sequence[str]) -> Iterator[str]:
    """A forking server of its own that has also imported the modules ``preload`` names (for
    programs that another program starts, through :func:`launch`): its socket's path. On
    leaving, it and every process it forked that is still running are killed (they share its
    session)."""
    folder = tempfile.mkdtemp(prefix="mcpauth-forks-")
    path = os.path.join(folder, "server.sock")
    process = _start(path, preload, new_session=True)
    try:
        yield path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.rmdir(folder)


def launch(path: str, program: Sequence[str]) -> int:
    """Run ``program`` (``-m module ...`` or ``script.py ...``) forked from the server at
    ``path`` with this process's standard streams, environment and directory, pass on the
    signals this process is sent, and end as it ends: ``python -S tests/forks.py launch PATH
    PROGRAM...`` is a command another program (the conformance suite) can start by the dozen
    for a few milliseconds each, where an interpreter importing the MCP SDK takes a second."""
    started: list[ForkedProcess] = []
    early: list[int] = []  # signals that came before the child's pid did

    def forward(number: int, _frame: object) -> None:
        if started:
            started[0].send_signal(number)
        else:
            early.append(number)

    # before the child starts: a signal sent once it runs must reach it, even one that comes
    # before its pid does (with the default disposition it would end the launcher alone)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    child = ForkedProcess(
        [sys.executable, *program], env=os.environ, stdin=0, stdout=1, stderr=2, server=path
    )
    started.append(child)
    for number in early:
        child.send_signal(number)
    code = child.wait()
    if code < 0:  # ended by a signal: end by the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


class ForkedProcess(subprocess.Popen[bytes]):
    """A forked child, driven as a :class:`subprocess.Popen`: ``pid``, ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``, ``returncode`` (its status comes from the forking
    server, its parent). Its standard streams are what it was given, never pipes to read."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        new_session: bool = False,
        pass_fds: Sequence[int] = (),
        server: str | None = None,
    ) -> None:
        program = program_of(args)
        assert program is not None, args
        # (Popen.__init__ is not called: nothing of it is started; these are what its other
        # methods and __del__ read)
        self.args = list(args)
        self.stdin = self.stdout = self.stderr = None
        self.returncode: int | None = None
        self._child_created = False
        self.encoding = self.errors = None
        self.text_mode = False
        self.universal_newlines = False
        opened: list[int] = []

        def devnull() -> int:
            opened.append(os.open(os.devnull, os.O_RDWR))
            return opened[-1]

        def fd_or(fd: int | None, default: int) -> int:
            if fd == subprocess.DEVNULL or (fd is None and default < 0):
                return devnull()
            return default if fd is None else fd

        # what the child gets as 0, 1, 2 (stdin from /dev/null unless given; stderr may be
        # STDOUT), then each of pass_fds at its own number
        out = fd_or(stdout, 1)
        err = out if stderr == subprocess.STDOUT else fd_or(stderr, 2)
        fds = [fd_or(stdin, -1), out, err, *pass_fds]
        request = json.dumps(
            {
                "program": program,
                "env": dict(env),
                "cwd": str(cwd or os.getcwd()),
                "new_session": new_session,
                "pass_fds": list(pass_fds),
            }
        ).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(server or _socket_path())
            socket.send_fds(self._conn, [_HEADER.pack(len(request))], fds)
            self._conn.sendall(request)
        finally:
            for fd in opened:
                os.close(fd)
        self._buffer = b""
        pid = self._line(timeout=60.0)
        if pid is None:
            raise RuntimeError(f"a forked {self.args} did not start within 60 s")
        self.pid = int(json.loads(pid)["pid"])

    def _line(self, timeout: float | None) -> bytes | None:
        """The next line the child or the forking server answered, or None at the timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the forking server went away while {self.args} ran")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        line = self._line(timeout)
        if line is None:
            return None
        self.returncode = int(json.loads(line)["returncode"])
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return status

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        pass  # nothing of Popen's to clean up; the forking server reaps the child


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: str | None,
    cwd: str | Path | None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``args`` in a forked process, as ``subprocess.run(..., capture_output=True,
    text=True, timeout=timeout)`` would run it."""
    deadline = time.monotonic() + timeout
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        process = ForkedProcess(args, env=env, cwd=cwd, stdin=stdin_r, stdout=out_w, stderr=err_w)
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
    data = (stdin or "").encode()
    try:
        while data:  # a command that exits without reading it all closes the pipe: fine
            data = data[os.write(stdin_w, data) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(stdin_w)
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    try:
        if any(reader.is_alive() for reader in readers):  # still writing at the deadline
            raise subprocess.TimeoutExpired(list(args), timeout)
        returncode = process.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(
        list(args), returncode, _text(output.get(out_r, b"")), _text(output.get(err_r, b""))
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


def _exit_code(exit_: SystemExit) -> int:
    """The status ``sys.exit(code)`` ends an interpreter with."""
    if exit_.code is None or isinstance(exit_.code, int):
        return exit_.code or 0
    print(exit_.code, file=sys.stderr)
    return 1


def _child(conn: socket.socket) -> None:  # pragma: no cover - runs in the forked child
    """Put the descriptors in place, answer the pid, run the program; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 64)
        request = json.loads(_recv_exactly(conn, _HEADER.unpack(header)[0]))
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        conn.close()  # before the descriptors go in place: its number may be one of theirs
        targets = [0, 1, 2, *request["pass_fds"]]
        above = max(targets) + 1  # out of the way of every target first
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]
        for fd in fds:
            os.close(fd)
        for target, fd in zip(targets, moved, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        code = _run(request["program"], request["cwd"])
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run(program: list[str], cwd: str) -> int:  # pragma: no cover - in the forked child
    import runpy

    try:
        if program[0] == "mcpauth":
            from mcpauth.cli import main

            sys.argv = program
            return main(program[1:])
        if program[0] == "-m":
            sys.argv = [program[1], *program[2:]]
            sys.path[0] = cwd
            runpy.run_module(program[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(program[0])
            sys.argv = [program[0], *program[1:]]
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exit_:
        return _exit_code(exit_)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:
        traceback.print_exc()
        return 1


def serve(path: str, preload: Sequence[str] = ()) -> None:  # pragma: no cover - its process
    """Import what the programs use (and the modules ``preload`` names), say ready, then fork a
    child per connection, reap each and answer its status on its connection."""
    import importlib

    import uvicorn  # noqa: F401

    import mcpauth.cli
    import mcpauth.server.admin
    import mcpauth.server.app

    mcpauth.cli.build_parser()  # every group's parser: the imports they make
    for module in preload:
        importlib.import_module(module)
    waker_r, waker_w = os.pipe()
    os.set_blocking(waker_w, False)
    signal.set_wakeup_fd(waker_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through waker_w
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(waker_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    os.close(waker_r)
                    os.close(waker_w)
                    for other in children.values():
                        other.close()
                    _child(conn)
                children[pid] = conn
            else:
                os.read(waker_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    code = os.waitstatus_to_exitcode(status)
                    conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
                conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "launch":  # launch PATH PROGRAM...
        sys.exit(launch(sys.argv[2], sys.argv[3:]))
    serve(sys.argv[1], sys.argv[2:])
