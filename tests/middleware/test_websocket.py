"""WebSocket connections get the HTTP policy: refused unless enabled; when enabled the handshake
needs a token for this resource, the required scopes, an allowed Origin and a session of one's
own, every frame is checked again, and the application never sees the token. Served by a real
uvicorn and reached with a real WebSocket client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.proxy.upstream import UpstreamProxy

from .helpers import ISSUER, RESOURCE, FakeAuthorizationServer, rpc, serve

pytestmark = pytest.mark.anyio


class EchoSocket:
    """A WebSocket app that accepts, records the handshake scope and echoes text frames."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        self.scopes.append(scope)
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", "text": message.get("text") or ""})


@pytest.fixture
def echo() -> EchoSocket:
    return EchoSocket()


@pytest.fixture
async def as_client(auth_server: FakeAuthorizationServer) -> AsyncIterator[httpx.AsyncClient]:
    async with auth_server.http_client() as client:
        yield client


@pytest.fixture
def served(echo: EchoSocket, as_client: httpx.AsyncClient) -> Iterator[Any]:
    """``served(**options)`` → ``ws://`` URL of the middleware around ``echo`` under uvicorn."""
    stack: list[Any] = []

    def start(**options: Any) -> str:
        app = ProtectedResourceMiddleware(
            echo, resource=RESOURCE, authorization_servers=[ISSUER], http_client=as_client,
            **options,
        )  # fmt: skip
        context = serve(app)
        stack.append(context)
        return f"ws://{context.__enter__()}/mcp"

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def auth(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


async def refused(url: str, headers: dict[str, str], **kwargs: Any) -> Any:
    with pytest.raises(InvalidStatus) as caught:
        async with connect(url, additional_headers=headers, open_timeout=10, **kwargs):
            pass
    return caught.value.response


async def test_a_websocket_handshake_is_refused_unless_websockets_are_enabled(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    response = await refused(served(), auth(auth_server.mint()))
    assert response.status_code == 403
    assert echo.scopes == []


async def test_a_websocket_without_a_token_gets_401_with_the_bearer_challenge(
    echo: EchoSocket, served: Any
) -> None:
    response = await refused(served(allow_websockets=True), {})
    assert response.status_code == 401
    assert response.headers.get_all("WWW-Authenticate")[0].startswith('Bearer resource_metadata="')
    assert json.loads(response.body)["error"] == "invalid_token"
    assert echo.scopes == []


async def test_a_websocket_for_another_audience_is_refused(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    token = auth_server.mint(aud="https://other.example.com/mcp")
    response = await refused(served(allow_websockets=True), auth(token))
    assert response.status_code == 401
    assert echo.scopes == []


async def test_a_websocket_needs_the_required_scopes(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    url = served(allow_websockets=True, required_scopes="files:read")
    response = await refused(url, auth(auth_server.mint(scope="mcp:basic")))
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers.get_all("WWW-Authenticate")[0]
    assert echo.scopes == []


async def test_a_websocket_from_an_origin_outside_the_allow_list_is_refused(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    url = served(allow_websockets=True, allowed_origins=["https://app.example.com"])
    token = auth_server.mint()
    response = await refused(url, auth(token), origin="https://evil.example.net")  # type: ignore[arg-type]
    assert response.status_code == 403
    assert echo.scopes == []
    async with connect(url, additional_headers=auth(token), origin="https://app.example.com"):  # type: ignore[arg-type]
        pass
    assert len(echo.scopes) == 1


async def test_a_websocket_cannot_name_a_session_it_does_not_own(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    url = served(allow_websockets=True)
    headers = auth(auth_server.mint(sub="mallory"), **{"Mcp-Session-Id": "alice-session"})
    response = await refused(url, headers)
    assert response.status_code == 404
    assert echo.scopes == []


async def test_the_application_never_sees_the_token_of_a_websocket(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    async with connect(
        served(allow_websockets=True), additional_headers=auth(auth_server.mint(sub="carol"))
    ) as socket:
        await socket.send("hello")
        assert await socket.recv() == "hello"
    (scope,) = echo.scopes
    assert b"authorization" not in {key.lower() for key, _ in scope["headers"]}
    assert scope["mcpauth.token"].subject == "carol"


async def test_a_websocket_frame_calling_a_tool_without_its_scope_closes_the_connection(
    auth_server: FakeAuthorizationServer, served: Any
) -> None:
    url = served(allow_websockets=True, tool_scopes={"delete_file": "files:write"})
    async with connect(url, additional_headers=auth(auth_server.mint(scope="mcp:basic"))) as ws:
        allowed = json.dumps(rpc("tools/call", {"name": "read_file"}))
        await ws.send(allowed)
        assert await ws.recv() == allowed
        await ws.send(json.dumps(rpc("tools/call", {"name": "delete_file"}, id=2)))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008


async def test_a_websocket_frame_after_the_token_expired_closes_the_connection(
    auth_server: FakeAuthorizationServer, served: Any
) -> None:
    # exp already passed, but within the verifier's leeway: the handshake is accepted.
    import time

    token = auth_server.mint(exp=int(time.time()) - 1)
    async with connect(served(allow_websockets=True), additional_headers=auth(token)) as ws:
        await ws.send("after expiry")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008


async def test_the_http_proxy_refuses_a_websocket_it_cannot_carry_instead_of_failing(
    auth_server: FakeAuthorizationServer, as_client: httpx.AsyncClient
) -> None:
    app = ProtectedResourceMiddleware(
        UpstreamProxy("http://127.0.0.1:9/mcp", path="/mcp"),
        resource=RESOURCE, authorization_servers=[ISSUER], http_client=as_client,
        allow_websockets=True,
    )  # fmt: skip
    with serve(app) as address:
        response = await refused(f"ws://{address}/mcp", auth(auth_server.mint()))
    assert response.status_code == 403
