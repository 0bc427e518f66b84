"""DPoP end to end with real processes (docs/security.md T30): ``mcpauth.client`` gets a
DPoP-bound token from the real ``mcpauth serve`` (it offers DPoP, so the client binds its
tokens without being told) and calls a tool through the middleware and through ``mcpauth
proxy``, with the official MCP SDK client; the same token copied without its key is refused
at both, as Bearer and as DPoP."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from mcpauth.client import ClientCredentials, ClientCredentialsGrant, MemoryStorage, OAuth

from ...e2e.test_authorization_flow import AuthServer, auth_server
from .conftest import Process

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture
def real_issuer(tmp_path: Path) -> Iterator[AuthServer]:
    with auth_server(tmp_path) as server:
        yield server


def machine(server: AuthServer, *resources: str) -> dict[str, str]:
    for resource in resources:
        server.cli("resources", "add", resource, "--scope", "mcp:basic")
    client = server.add_client(
        "--name", "dpop bot", "--grant-type", "client_credentials", "--scope", "mcp:basic"
    )
    return {"client_id": client["client_id"], "client_secret": client["client_secret"]}


async def identity_through(url: str, auth: httpx2.Auth) -> str:
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("identity", {})
    return "".join(part.text for part in result.content if isinstance(part, TextContent))


async def copied_without_key(url: str, token: str) -> list[int]:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx2.AsyncClient(timeout=30) as http:
        return [
            (
                await http.post(url, json=ping, headers={"Authorization": f"{scheme} {token}"})
            ).status_code
            for scheme in ("Bearer", "DPoP")
        ]


async def test_a_dpop_bound_token_works_through_middleware_and_proxy_and_its_copy_does_not(
    spawn: Callable[..., Process], real_issuer: AuthServer
) -> None:
    issuer = real_issuer.issuer
    protected = spawn("mcp", "--issuer", issuer, "--resource", "{url}/mcp", path="/mcp")
    upstream = spawn("mcp", "--unprotected", path="/mcp")
    proxy = spawn(
        "--resource", "{url}/mcp", "--authorization-server", issuer, "--scope", "mcp:basic",
        "--upstream", upstream.url, module="mcpauth.proxy.cli", path="/mcp",
    )  # fmt: skip
    bot = machine(real_issuer, protected.url, proxy.url)
    for url in (protected.url, proxy.url):
        auth = OAuth(
            url,
            credentials=ClientCredentials(bot["client_id"], bot["client_secret"]),
            grant=ClientCredentialsGrant(scopes=["mcp:basic"]),
            storage=MemoryStorage(),
        )
        # the resources were added by another process: the server sees them within seconds
        deadline = time.monotonic() + 10
        while True:
            try:
                seen = await identity_through(url, auth)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.2)
        tokens = auth.tokens
        assert tokens is not None
        assert tokens.bound
        assert seen.endswith("|-|-")  # neither the token nor its proof went further
        if url == proxy.url:
            assert seen.startswith(f"{bot['client_id']}|")  # the proxy's identity headers
        assert await copied_without_key(url, tokens.access_token) == [401, 401]
