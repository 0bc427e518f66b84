"""The official MCP Python SDK server wrapped by the middleware under uvicorn, called by the
official SDK client over httpx2 with a bearer token minted here."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mcpauth import jwt

from .conftest import Process
from .serve import KID

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def mint(key: jwt.PrivateKey, issuer: str, resource: str, **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": issuer,
        "sub": "alice",
        "aud": resource,
        "client_id": "e2e-client",
        "scope": "mcp:basic",
        "iat": now,
        "exp": now + 300,
        "jti": secrets.token_hex(8),
    }
    body.update(claims)
    return jwt.encode(body, key, alg="ES256", kid=KID)


@pytest.fixture
def servers(
    spawn: Callable[..., Process], signing_key: tuple[jwt.PrivateKey, Path]
) -> tuple[str, str]:
    _, key_file = signing_key
    authz = spawn("as", "--issuer", "{url}", "--key-file", str(key_file))
    mcp = spawn("mcp", "--issuer", authz.url, "--resource", "{url}/mcp", path="/mcp")
    return authz.url, mcp.url


async def call_tools(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    statuses: list[tuple[int, str]] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append((response.status_code, response.headers.get("www-authenticate", "")))

    client = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        event_hooks={"response": [record]},
    )
    results: list[Any] = []
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        results.append(sorted(tool.name for tool in tools.tools))
        for name, arguments in calls:
            try:
                result = await session.call_tool(name, arguments)
                results.append(result.content[0].text)  # type: ignore[union-attr]
            except Exception as exc:
                results.append(exc)
    results.append(statuses)
    return results


async def test_an_sdk_tool_sees_the_callers_subject_through_get_access_token(
    servers: tuple[str, str], signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    issuer, url = servers
    token = mint(signing_key[0], issuer, url, scope="mcp:basic extra")
    tools, whoami, counted, statuses = await call_tools(
        url, token, [("whoami", {}), ("count", {"n": 3})]
    )
    assert {"whoami", "delete_file", "count"} <= set(tools)
    assert whoami == "alice|e2e-client|mcp:basic extra|alice"
    assert counted == "counted 3"
    assert all(status == 200 or status == 202 for status, _ in statuses)


async def test_a_per_tool_scope_gets_403_with_the_challenge_and_the_tool_never_runs(
    servers: tuple[str, str], signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    issuer, url = servers
    token = mint(signing_key[0], issuer, url)
    *_, outcome, statuses = await call_tools(url, token, [("delete_file", {"path": "/x"})])
    assert isinstance(outcome, Exception)
    challenge = next(h for s, h in statuses if s == 403)
    prm = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert challenge.startswith(
        'Bearer error="insufficient_scope", scope="files:write mcp:basic", '
        f'resource_metadata="{prm}"'
    )
    admin = mint(signing_key[0], issuer, url, scope="mcp:basic files:admin")
    *_, deleted, _ = await call_tools(url, admin, [("delete_file", {"path": "/x"})])
    assert deleted == "deleted /x"


async def test_without_a_token_the_sdk_server_answers_401_and_publishes_metadata(
    servers: tuple[str, str],
) -> None:
    issuer, url = servers
    async with httpx2.AsyncClient(timeout=30) as client:
        refused = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        prm = await client.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith(
        'Bearer resource_metadata="http://127.0.0.1'
    )
    assert prm.json()["resource"] == url
    assert prm.json()["authorization_servers"] == [issuer]


async def test_a_session_opened_by_alice_is_refused_to_mallory_end_to_end(
    servers: tuple[str, str], signing_key: tuple[jwt.PrivateKey, Path]
) -> None:
    issuer, url = servers
    alice = mint(signing_key[0], issuer, url)
    mallory = mint(signing_key[0], issuer, url, sub="mallory")
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as client:
        opened = await client.post(
            url, json=init, headers={**accept, "Authorization": f"Bearer {alice}"}
        )
        session = opened.headers["mcp-session-id"]
        hijack = await client.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**accept, "Authorization": f"Bearer {mallory}", "Mcp-Session-Id": session},
        )
    assert opened.status_code == 200
    assert hijack.status_code == 404
