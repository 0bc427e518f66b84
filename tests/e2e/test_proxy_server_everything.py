"""`mcpauth proxy` in front of a Node MCP server from npm: the reference
`@modelcontextprotocol/server-everything` in Streamable HTTP mode, with tokens from the real
`mcpauth serve`. The official SDK client signs in through the forms, lists the Node server's
tools through the proxy and calls its streaming tool: the progress notifications arrive over SSE
while the call is still running, so the proxy does not buffer the stream.

The package is installed with npm into `.npm-peers/` (pinned below). The Node server listens on
every interface by default; a small preload pins it to 127.0.0.1. Skipped only when npm is not
available or the package does not install."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from ..support import MCPAUTH, ensure_npm_peers, free_port, running
from .test_sdk_oauth_client import (
    FormBrowser,
    Traffic,
    auth_server,
    mcp_session,
    oauth_provider,
    text,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
STREAMING_TOOL = "trigger-long-running-operation"
# Node's http servers listen on every interface unless told otherwise; the server takes only PORT
LOOPBACK_PRELOAD = """\
import http from "node:http";
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  return typeof port === "number" || typeof port === "string"
    ? listen.call(this, Number(port), "127.0.0.1", ...rest)
    : listen.call(this, port, ...rest);
};
"""


@pytest.fixture(scope="module")
def server_everything() -> tuple[str, Path]:
    """Node 22 and the server's entry point, installed (pinned) by scripts/ensure-npm-peers.sh
    with the other npm packages the tests use; a failed install fails the test."""
    peers = ensure_npm_peers()
    package = json.loads((peers / "node_modules" / PACKAGE / "package.json").read_text())
    assert package["version"] == VERSION
    node = ROOT / ".node22" / "node_modules" / ".bin" / "node"
    return str(node), peers / "node_modules" / PACKAGE / "dist" / "index.js"


@dataclass
class Stack:
    resource: str
    upstream: str
    issuer: str


@pytest.fixture(scope="module")
def stack(
    server_everything: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """server-everything on a loopback port, `mcpauth serve` knowing the proxy's resource, and
    `mcpauth proxy --upstream` in front of the Node server."""
    node, entry = server_everything
    tmp_path = tmp_path_factory.mktemp("everything")
    preload = tmp_path / "loopback.mjs"
    preload.write_text(LOOPBACK_PRELOAD)
    node_port, proxy_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{node_port}/mcp"
    resource = f"http://127.0.0.1:{proxy_port}/mcp"
    prm = f"http://127.0.0.1:{proxy_port}/.well-known/oauth-protected-resource/mcp"
    everything = [node, "--import", str(preload), str(entry), "streamableHttp"]
    with (
        running(everything, ready_url=upstream, env={"PORT": str(node_port)}, cwd=tmp_path),
        auth_server(tmp_path, resource) as auth,
    ):
        proxy = [
            MCPAUTH, "proxy", "--upstream", upstream, "--resource", resource,
            "--authorization-server", auth.issuer, "--port", str(proxy_port),
            "--scope", "mcp:tools", "--resource-name", "server-everything behind mcpauth",
        ]  # fmt: skip
        with running(proxy, ready_url=prm, cwd=tmp_path):
            yield Stack(resource, upstream, auth.issuer)


async def test_rs08_the_proxy_refuses_an_anonymous_caller_and_publishes_metadata_for_node(
    stack: Stack,
) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        anonymous = await http.post(
            stack.resource, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        metadata = (await http.get(anonymous.headers["www-authenticate"].split('"')[1])).json()
    assert anonymous.status_code == 401
    assert metadata["resource"] == stack.resource
    assert metadata["authorization_servers"] == [stack.issuer]


async def test_the_sdk_client_lists_and_streams_a_node_servers_tool_through_the_proxy_over_sse(
    stack: Stack,
) -> None:
    browser = FormBrowser()
    traffic = Traffic()
    provider = oauth_provider(stack.resource, browser)
    progress: list[tuple[float, float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((time.monotonic(), done, total))

    try:
        async with mcp_session(stack.resource, provider, traffic) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            echoed = text(await session.call_tool("echo", {"message": "through the proxy"}))
            started = time.monotonic()
            result = await session.call_tool(
                STREAMING_TOOL, {"duration": 2, "steps": 4}, progress_callback=on_progress
            )
            finished = time.monotonic()
    finally:
        await browser.aclose()

    assert {"echo", STREAMING_TOOL} <= tools
    assert [trip.pages for trip in browser.authorizations] == [["login", "consent"]]
    assert echoed == "Echo: through the proxy"
    assert text(result) == "Long running operation completed. Duration: 2 seconds, Steps: 4."
    assert [(done, total) for _, done, total in progress] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    # streamed, not buffered: the first step arrived well before the call ended (steps 0.5 s)
    assert progress[0][0] - started < finished - started - 0.9
    # the answers to the calls came through the proxy as server-sent events
    calls = [e for e in traffic.exchanges if e.url == stack.resource and e.method == "POST"]
    assert all(e.authorization.startswith("Bearer ") for e in calls[1:])
    assert any(e.content_type.startswith("text/event-stream") for e in calls)
    assert all(e.status in (200, 202) for e in calls[1:])
