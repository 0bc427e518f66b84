"""Real processes on 127.0.0.1: each gets a listening socket bound to an ephemeral port by the
test (so the URL is known up front and nothing races for the port) and is always stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcpauth import jwt
from tests import forks
from tests.redis_server import redis_server, redis_url, silent_redis  # noqa: F401  (fixtures)
from tests.support import wait_for

SERVE = Path(__file__).with_name("serve.py")
READY_SECONDS = 60.0  # a process start on a loaded 2-core machine


@dataclass
class Process:
    url: str
    popen: subprocess.Popen[bytes]


def listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def stop(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=10)


class Spawner:
    """Starts ``[python, script, *argv]`` with a listening socket passed as ``--fd`` (before any
    ``--``); ``{url}`` in ``argv`` becomes the socket's URL. :meth:`close` stops them all."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.sockets: list[socket.socket] = []

    def __call__(
        self, *argv: str, path: str = "", script: Path = SERVE, module: str | None = None
    ) -> Process:
        sock = listening_socket()
        self.sockets.append(sock)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        fd = ["--fd", str(sock.fileno())]
        argv = tuple(a.replace("{url}", url) for a in argv)
        split = argv.index("--") if "--" in argv else len(argv)
        target = ["-m", module] if module else [str(script)]
        args = [sys.executable, *target, *argv[:split], *fd, *argv[split:]]
        popen = (
            forks.ForkedProcess(args, env=os.environ, pass_fds=[sock.fileno()])
            if forks.forkable(args, os.environ)
            else subprocess.Popen(args, pass_fds=(sock.fileno(),))
        )
        self.started.append(popen)
        # answering before it is used: a request queued in the backlog of a process still
        # importing (seconds on a loaded machine) would otherwise meet the caller's own
        # timeout, as a proxy's first fetch of the authorization server's metadata did
        wait_for(url + "/", timeout=READY_SECONDS, process=popen)
        return Process(url=url + path, popen=popen)

    def close(self) -> None:
        for popen in reversed(self.started):
            stop(popen)
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Process]]:
    """A :class:`Spawner` whose processes are stopped at teardown."""
    spawner = Spawner()
    yield spawner
    spawner.close()


@pytest.fixture
def signing_key(tmp_path: Path) -> tuple[jwt.PrivateKey, Path]:
    key = jwt.generate_private_key("ES256")
    path = tmp_path / "key.pem"
    path.write_bytes(jwt.private_key_to_pem(key))
    return key, path
