"""``mcpauth proxy -- COMMAND`` cannot be exhausted by one user: sessions (child processes) are
capped per subject (429) and in all (503), both with Retry-After and a JSON-RPC error body, and
idle sessions are reaped (child stopped, slot freed). Real uvicorn, real child processes; the
idle clock is moved by hand and waits are bounded polls."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.proxy import StdioBridge
from tests.middleware.helpers import ISSUER, RESOURCE, FakeAuthorizationServer, bearer, serve

pytestmark = pytest.mark.anyio

ECHO = Path(__file__).with_name("stdio_echo.py")
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


class Clock:
    """The bridge's idle clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def as_http(auth_server: FakeAuthorizationServer) -> AsyncIterator[httpx2.AsyncClient]:
    async with auth_server.http_client() as client:
        yield client


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def bridges() -> list[StdioBridge]:
    return []


@pytest.fixture
def bridge_url(
    as_http: httpx2.AsyncClient, clock: Clock, tmp_path: Path, bridges: list[StdioBridge]
) -> Iterator[Any]:
    """``bridge_url(**limits)``: URL of the protected stdio bridge under uvicorn."""
    contexts: list[Any] = []

    def start(**limits: Any) -> str:
        limits.setdefault("reap_interval", 0.02)
        bridge = StdioBridge(
            [sys.executable, str(ECHO)], env={"ECHO_PID_DIR": str(tmp_path)}, clock=clock,
            **limits,
        )  # fmt: skip
        bridges.append(bridge)
        app = ProtectedResourceMiddleware(
            bridge, resource=RESOURCE, authorization_servers=[ISSUER], http_client=as_http
        )
        context = serve(app, lifespan="on")
        contexts.append(context)
        return f"http://{context.__enter__()}/mcp"

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


async def initialize(client: httpx2.AsyncClient, url: str, token: str) -> httpx2.Response:
    return await client.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **bearer(token)})


async def ping(client: httpx2.AsyncClient, url: str, token: str, session: str) -> httpx2.Response:
    headers = {
        **MCP_HEADERS,
        **bearer(token),
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-06-18",
    }
    return await client.post(
        url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers
    )


def children(directory: Path, subject: str) -> list[int]:
    return [int(p.name) for p in directory.iterdir() if p.read_text() == subject]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def settle(bridge: StdioBridge) -> None:
    """Wait until no request is in flight: the server may finish a request (and note its last
    use) just after the client has read the response."""
    wait_until(lambda: all(session.active == 0 for session in list(bridge.sessions.values())))


def assert_busy(response: httpx2.Response, status: int) -> None:
    assert response.status_code == status
    assert int(response.headers["Retry-After"]) >= 1
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == -32000
    assert "Too many open sessions" in body["error"]["message"]


async def test_one_subject_cannot_open_more_sessions_than_its_cap_and_others_still_can(
    auth_server: FakeAuthorizationServer, bridge_url: Any, tmp_path: Path
) -> None:
    url = bridge_url(max_sessions_per_subject=2, max_sessions=10)
    alice, bob = auth_server.mint(sub="alice"), auth_server.mint(sub="bob")
    async with httpx2.AsyncClient(timeout=30) as client:
        opened = [await initialize(client, url, alice) for _ in range(2)]
        assert [r.status_code for r in opened] == [200, 200]
        assert_busy(await initialize(client, url, alice), 429)
        assert (await initialize(client, url, bob)).status_code == 200
    assert len(children(tmp_path, "alice")) == 2


async def test_the_number_of_children_is_bounded_in_all_with_503(
    auth_server: FakeAuthorizationServer, bridge_url: Any, tmp_path: Path
) -> None:
    url = bridge_url(max_sessions_per_subject=5, max_sessions=2)
    async with httpx2.AsyncClient(timeout=30) as client:
        for subject in ("alice", "bob"):
            response = await initialize(client, url, auth_server.mint(sub=subject))
            assert response.status_code == 200
        assert_busy(await initialize(client, url, auth_server.mint(sub="carol")), 503)
    assert children(tmp_path, "carol") == []


async def test_an_idle_session_is_reaped_its_child_stopped_and_its_slot_freed(
    auth_server: FakeAuthorizationServer,
    bridge_url: Any,
    bridges: list[StdioBridge],
    clock: Clock,
    tmp_path: Path,
) -> None:
    url = bridge_url(max_sessions_per_subject=1, idle_timeout=60)
    alice = auth_server.mint(sub="alice")
    async with httpx2.AsyncClient(timeout=30) as client:
        first = await initialize(client, url, alice)
        session = first.headers["mcp-session-id"]
        (pid,) = children(tmp_path, "alice")
        assert alive(pid)
        assert_busy(await initialize(client, url, alice), 429)
        settle(bridges[0])
        clock.now += 61
        wait_until(lambda: not alive(pid))
        assert (await ping(client, url, alice, session)).status_code == 404
        assert (await initialize(client, url, alice)).status_code == 200


async def test_a_session_in_use_is_not_reaped(
    auth_server: FakeAuthorizationServer,
    bridge_url: Any,
    bridges: list[StdioBridge],
    clock: Clock,
    tmp_path: Path,
) -> None:
    # No background reaping here: the refusal path reaps before it refuses.
    url = bridge_url(max_sessions_per_subject=1, idle_timeout=60, reap_interval=3600)
    alice = auth_server.mint(sub="alice")
    async with httpx2.AsyncClient(timeout=30) as client:
        session = (await initialize(client, url, alice)).headers["mcp-session-id"]
        settle(bridges[0])
        clock.now += 50
        assert (await ping(client, url, alice, session)).status_code == 200
        settle(bridges[0])
        clock.now += 50
        assert_busy(await initialize(client, url, alice), 429)
        (pid,) = children(tmp_path, "alice")
        assert alive(pid)
        clock.now += 61
        assert (await initialize(client, url, alice)).status_code == 200
        wait_until(lambda: not alive(pid))
    assert len(children(tmp_path, "alice")) == 2
