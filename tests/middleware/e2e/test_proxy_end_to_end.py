"""``mcpauth proxy`` as a real process in front of (a) the official SDK server over HTTP and
(b) an MCP stdio server; the official SDK client calls through it; SSE streams pass."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from mcpauth import jwt

from .conftest import SERVE, Process
from .test_sdk_end_to_end import call_tools, mint

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def start_proxy(spawn: Callable[..., Process], issuer: str, *mode: str) -> Process:
    return spawn(
        "--resource", "{url}/mcp", "--authorization-server", issuer,
        "--scope", "mcp:basic", "--tool-scope", "delete_file=files:write", *mode,
        module="mcpauth.proxy.cli", path="/mcp",
    )  # fmt: skip


@pytest.fixture
def issuer(spawn: Callable[..., Process], signing_key: tuple[jwt.PrivateKey, Path]) -> str:
    return spawn("as", "--issuer", "{url}", "--key-file", str(signing_key[1])).url


async def test_the_proxy_protects_an_http_upstream_and_streams_sse(
    spawn: Callable[..., Process], issuer: str, signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    upstream = spawn("mcp", "--unprotected", path="/mcp")
    proxy = start_proxy(spawn, issuer, "--upstream", upstream.url)
    token = mint(signing_key[0], issuer, proxy.url, sub="alice", scope="mcp:basic")
    tools, identity, counted, refused, statuses = await call_tools(
        proxy.url, token, [("identity", {}), ("count", {"n": 5}), ("delete_file", {"path": "/x"})]
    )
    assert "identity" in tools
    assert identity == "alice|e2e-client|mcp:basic|-|-"
    assert counted == "counted 5"
    assert isinstance(refused, Exception)
    assert any(status == 403 for status, _ in statuses)
    async with httpx2.AsyncClient(timeout=30) as client:
        anonymous = await client.post(proxy.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert anonymous.status_code == 401


async def test_a_dead_upstream_gives_502_through_the_real_proxy(
    spawn: Callable[..., Process], issuer: str, signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    proxy = start_proxy(spawn, issuer, "--upstream", "http://127.0.0.1:9/mcp")
    token = mint(signing_key[0], issuer, proxy.url)
    async with httpx2.AsyncClient(timeout=30) as client:
        response = await client.post(
            proxy.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == -32603


async def test_the_proxy_serves_a_stdio_server_as_a_protected_endpoint(
    spawn: Callable[..., Process], issuer: str, signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    proxy = start_proxy(spawn, issuer, "--", sys.executable, str(SERVE), "mcp-stdio")
    token = mint(signing_key[0], issuer, proxy.url, sub="bob", scope="mcp:basic files:write")
    tools, identity, counted, deleted, _ = await call_tools(
        proxy.url,
        token,
        [("identity", {}), ("count", {"n": 3}), ("delete_file", {"path": "/y"})],
    )
    assert "count" in tools
    assert identity == "bob|e2e-client|mcp:basic files:write"
    assert counted == "counted 3"
    assert deleted == "deleted /y"
