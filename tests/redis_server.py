"""Throwaway Redis servers for the shared-state tests (``shared_state=``, ``mcpauth proxy
--shared-state``).

:func:`start_redis` runs Debian's ``redis-server`` (``scripts/ensure-redis.sh`` installs it;
``MCPAUTH_REDIS_SERVER`` names another binary) on a free 127.0.0.1 port, in a fresh temporary
directory, with persistence off (``--save ''``, ``--appendonly no``): nothing is written to
disk and nothing outlives the test run. It dies with the test process if that is killed
(parent-death signal) and is stopped, its directory removed, by :meth:`RedisServer.stop`.
The session fixture ``redis_server`` is one such server per test session (per xdist worker);
``redis_url`` hands a test that server emptied (``FLUSHALL``); a test that stops its server
starts its own with :func:`start_redis`. ``silent_redis`` is a listener that accepts and never
answers, a Redis that hangs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from .pg import _die_with_parent
from .support import free_port

START_TIMEOUT = 15.0
ATTEMPTS = 5  # a free port may be taken between the probe and redis-server's bind


def find_redis_server() -> str:
    """The ``redis-server`` binary: ``MCPAUTH_REDIS_SERVER``, else the one on ``PATH``."""
    configured = os.environ.get("MCPAUTH_REDIS_SERVER")
    found = configured or shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).is_file():
        pytest.fail(
            "no redis-server found: run scripts/ensure-redis.sh "
            "(or set MCPAUTH_REDIS_SERVER to the binary)"
        )
    return found


@dataclass
class RedisServer:
    """A running throwaway server; ``url`` is what mcpauth is configured with."""

    root: Path
    port: int
    process: subprocess.Popen[bytes]

    host = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        """A synchronous client, to look at what the tests' processes stored."""
        return redis.Redis(host=self.host, port=self.port, socket_timeout=5)

    def log_tail(self, chars: int = 4000) -> str:
        log = self.root / "redis.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _launch(binary: str, root: Path, port: int) -> subprocess.Popen[bytes]:
    options = [
        "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
        "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
    ]  # fmt: skip
    with open(root / "redis.log", "ab") as log:
        return subprocess.Popen(
            [binary, *options],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            preexec_fn=_die_with_parent,
        )


def _answers(port: int) -> bool:
    try:
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def start_redis() -> RedisServer:
    """A new server on a free port, answering ``PING``."""
    binary = find_redis_server()
    root = Path(tempfile.mkdtemp(prefix="mcpauth-redis-"))
    for _ in range(ATTEMPTS):
        port = free_port()
        server = RedisServer(root=root, port=port, process=_launch(binary, root, port))
        deadline = time.monotonic() + START_TIMEOUT
        while server.process.poll() is None:
            if _answers(port):
                return server
            if time.monotonic() > deadline:
                tail = server.log_tail()
                server.stop()
                pytest.fail(f"redis-server did not answer in {START_TIMEOUT} s:\n{tail}")
            time.sleep(0.02)
        # it exited: most likely another process took the port meanwhile; try another one
    log = root / "redis.log"
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    shutil.rmtree(root, ignore_errors=True)
    pytest.fail(f"redis-server could not start on a free port:\n{tail}")


class SilentListener:
    """A TCP listener that accepts connections and never answers: a Redis that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.sock.close()
        self._thread.join(timeout=5)
        for connection in self.accepted:
            connection.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's Redis server."""
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def silent_redis() -> Iterator[SilentListener]:
    """A Redis that accepts connections and never answers."""
    listener = SilentListener()
    yield listener
    listener.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's server, emptied for this test."""
    with redis_server.client() as client:
        client.flushall()
    return redis_server.url
