"""WebSocket connections are refused: MCP defines no WebSocket transport, so a handshake never
reaches the application, whatever token it carries; both proxy apps (HTTP and stdio) refuse one
too. Served by a real uvicorn and reached with a real WebSocket client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.proxy.stdio import StdioBridge
from mcpauth.proxy.upstream import UpstreamProxy

from .helpers import ISSUER, RESOURCE, FakeAuthorizationServer, serve

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
async def as_client(auth_server: FakeAuthorizationServer) -> AsyncIterator[httpx2.AsyncClient]:
    async with auth_server.http_client() as client:
        yield client


@pytest.fixture
def served(echo: EchoSocket, as_client: httpx2.AsyncClient) -> Iterator[Any]:
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


async def test_a_websocket_handshake_is_refused_even_with_a_valid_token(
    auth_server: FakeAuthorizationServer, echo: EchoSocket, served: Any
) -> None:
    response = await refused(served(), auth(auth_server.mint()))
    assert response.status_code == 403
    assert echo.scopes == []


async def test_the_http_proxy_refuses_a_websocket_it_cannot_carry_instead_of_failing(
    auth_server: FakeAuthorizationServer,
) -> None:
    with serve(UpstreamProxy("http://127.0.0.1:9/mcp", path="/mcp")) as address:
        response = await refused(f"ws://{address}/mcp", auth(auth_server.mint()))
    assert response.status_code == 403


async def test_the_stdio_bridge_refuses_a_websocket_without_starting_its_command(
    auth_server: FakeAuthorizationServer,
) -> None:
    bridge = StdioBridge([sys.executable, "-c", "raise SystemExit(3)"])
    with serve(bridge) as address:
        response = await refused(f"ws://{address}/mcp", auth(auth_server.mint()))
    assert response.status_code == 403
    assert bridge.sessions == {}
