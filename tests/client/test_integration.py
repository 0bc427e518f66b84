"""The same OAuth object with httpx (sync and async), httpx2 and the official MCP Python SDK,
against the fake AS/RS in process (ASGI) and on 127.0.0.1 (uvicorn)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from mcpauth.client import CallableRedirectHandler, FileStorage, OAuth, Policy
from tests.client.conftest import _SyncASGI, follow
from tests.client.fakes import FakeServers, serve

pytestmark = pytest.mark.anyio


def in_process_user(fake: FakeServers) -> httpx2.Client:
    return httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base)


def oauth(fake: FakeServers, user: httpx2.Client, storage: FileStorage | None = None) -> OAuth:
    return OAuth(
        fake.resource,
        storage=storage,
        redirect_handler=CallableRedirectHandler("http://127.0.0.1:9999/callback", follow(user)),
        policy=Policy(clock=fake.clock),
    )


async def test_httpx_async_client_gets_a_token_and_retries_the_request(fake: FakeServers) -> None:
    with in_process_user(fake) as user:
        auth = oauth(fake, user)
        transport = httpx2.ASGITransport(app=fake.app())
        async with httpx2.AsyncClient(transport=transport, auth=auth) as client:
            response = await client.post(fake.resource, json={})
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    assert len(fake.authorize_requests) == 1


async def test_httpx2_async_client_uses_the_same_oauth_object(fake: FakeServers) -> None:
    with in_process_user(fake) as user:
        auth = oauth(fake, user)
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=fake.app()), auth=auth
        ) as client:
            response = await client.post(fake.resource, json={})
        assert response.status_code == 200
        transport = httpx2.ASGITransport(app=fake.app())
        async with httpx2.AsyncClient(transport=transport, auth=auth) as client:
            again = await client.post(fake.resource, json={})
    assert again.status_code == 200
    assert len(fake.authorize_requests) == 1  # the token from the httpx2 call served httpx too


async def test_concurrent_requests_share_one_authorization(fake: FakeServers) -> None:
    with in_process_user(fake) as user:
        auth = oauth(fake, user)
        transport = httpx2.ASGITransport(app=fake.app())
        async with httpx2.AsyncClient(transport=transport, auth=auth) as client:
            statuses: list[int] = []

            async def call() -> None:
                statuses.append((await client.post(fake.resource, json={})).status_code)

            async with anyio.create_task_group() as group:
                for _ in range(5):
                    group.start_soon(call)
    assert statuses == [200] * 5
    assert len(fake.authorize_requests) == 1


@pytest.fixture
def served(fake: FakeServers) -> Iterator[FakeServers]:
    with serve(fake.app()) as base:
        fake.base = base
        yield fake


def test_httpx_sync_client_against_a_real_socket(served: FakeServers) -> None:
    with httpx2.Client() as user:
        auth = oauth(served, user)
        with httpx2.Client(auth=auth) as client:
            first = client.post(served.resource, json={})
            second = client.get(served.resource)
    assert (first.status_code, second.status_code) == (200, 200)
    assert len(served.authorize_requests) == 1


def test_the_token_survives_a_restart_through_file_storage(
    served: FakeServers, tmp_path: Path
) -> None:
    store = tmp_path / "client.json"
    with httpx2.Client() as user:
        with httpx2.Client(auth=oauth(served, user, storage=FileStorage(store))) as client:
            assert client.post(served.resource, json={}).status_code == 200
        served.now += served.expires_in + 1
        with httpx2.Client(auth=oauth(served, user, storage=FileStorage(store))) as client:
            assert client.post(served.resource, json={}).status_code == 200
    assert len(served.authorize_requests) == 1
    assert [r["grant_type"] for r in served.token_requests] == [
        "authorization_code",
        "refresh_token",
    ]


def _mcp_app() -> object:
    server = MCPServer("fake")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return server.streamable_http_app(host="127.0.0.1")


@pytest.fixture
def mcp_served(fake: FakeServers) -> Iterator[FakeServers]:
    app = fake.app(mcp_app=_mcp_app())  # type: ignore[arg-type]
    with serve(app) as base:
        fake.base = base
        yield fake


async def test_the_official_mcp_sdk_client_authenticates_and_steps_up(
    mcp_served: FakeServers,
) -> None:
    fake = mcp_served
    fake.challenge_scope = "tools:read"
    with httpx2.Client() as user:
        auth = oauth(fake, user)
        async with (
            httpx2.AsyncClient(auth=auth, timeout=10) as http,
            streamable_http_client(fake.resource, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            assert [t.name for t in tools.tools] == ["add"]
            fake.required_scopes = {"tools:write"}
            result = await session.call_tool("add", {"a": 2, "b": 3})
            assert not result.is_error
    scopes = [r.get("scope") for r in fake.authorize_requests]
    assert scopes == ["tools:read", "tools:read tools:write"]
