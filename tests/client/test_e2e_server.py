"""End to end with real processes: this project's authorization server (`mcpauth serve`), an
MCP server behind this project's middleware, and the client helper (CLI and MCP SDK)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from mcpauth.client import FileStorage, OAuth
from mcpauth.client import callback as callback_module
from mcpauth.client.callback import LoopbackRedirectHandler
from tests.client.browser import visit
from tests.client.fakes import serve
from tests.support import MCPAUTH, free_port, run_cli, running

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "correct horse battery"


@dataclass
class Stack:
    issuer: str
    resource: str
    env: dict[str, str]


def _mcp_app(resource: str, issuer: str) -> object:
    from mcpauth.middleware import ProtectedResource, ProtectedResourceMiddleware, ScopePolicy

    server = MCPServer("e2e")

    @server.tool()
    def read() -> str:
        """Read something."""
        return "read ok"

    @server.tool()
    def write() -> str:
        """Write something."""
        return "write ok"

    return ProtectedResourceMiddleware(
        server.streamable_http_app(host="127.0.0.1"),
        resource=ProtectedResource(resource, scopes_supported=["tools:read"]),
        authorization_servers=[issuer],
        policy=ScopePolicy(required=("tools:read",), tools={"write": "tools:write"}),
    )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = {
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path),
        "MCPAUTH_CLIENT_STORE": str(tmp_path / "client.json"),
    }
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    with serve(factory=lambda base: _mcp_app(f"{base}/mcp", issuer)) as rs_base:  # type: ignore[arg-type, return-value]
        resource = f"{rs_base}/mcp"
        scopes = [
            "--scope",
            "tools:read",
            "--scope",
            "tools:write",
            "--default-scope",
            "tools:read",
        ]
        for args in (
            ["users", "add", USER, "--password-stdin"],
            ["resources", "add", resource, *scopes],
        ):
            done = run_cli(args, env=env, stdin=f"{PASSWORD}\n", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
        serve_args = [MCPAUTH, "serve", "--issuer", issuer, "--port", str(port)]
        ready = f"{issuer}/.well-known/oauth-authorization-server"
        with running(serve_args, ready_url=ready, env=env, cwd=tmp_path):
            yield Stack(issuer, resource, env)


def cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "import argparse, sys\n"
        "from mcpauth.client.cli import add_client_parsers\n"
        "p = argparse.ArgumentParser(prog='mcpauth')\n"
        "add_client_parsers(p.add_subparsers(dest='command', required=True))\n"
        "a = p.parse_args(sys.argv[1:])\n"
        "sys.exit(a.handler(a))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def test_login_token_and_restart_refresh_against_the_real_server(stack: Stack) -> None:
    browser = {
        **stack.env,
        "BROWSER": f"{sys.executable} {ROOT / 'tests' / 'client' / 'browser.py'} %s",
        "MCPAUTH_TEST_USERNAME": USER,
        "MCPAUTH_TEST_PASSWORD": PASSWORD,
    }
    login = cli("login", stack.resource, "--timeout", "30", env=browser)
    assert login.returncode == 0, login.stderr
    token = cli("token", stack.resource, env=stack.env)
    assert token.returncode == 0, token.stderr
    access = token.stdout.strip()
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"authorization": f"Bearer {access}", "accept": "application/json, text/event-stream"}
    assert httpx2.post(stack.resource, json=ping, headers=headers).status_code != 401

    store = Path(stack.env["MCPAUTH_CLIENT_STORE"])
    document = json.loads(store.read_text())
    for entry in document["tokens"].values():
        entry["expires_at"] = 0  # the process was gone past the access token's lifetime
    store.write_text(json.dumps(document))
    again = cli("token", stack.resource, env=stack.env)  # no browser: must refresh
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() not in ("", access)


async def test_the_mcp_sdk_client_steps_up_against_the_real_server(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(callback_module.webbrowser, "open", lambda url: visit(url, USER, PASSWORD))
    handler = LoopbackRedirectHandler(timeout=30, out=io.StringIO())
    auth = OAuth(
        stack.resource, storage=FileStorage(tmp_path / "sdk.json"), redirect_handler=handler
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=20) as http,
        streamable_http_client(stack.resource, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        assert (await session.call_tool("read", {})).content[0].text == "read ok"  # type: ignore[union-attr]
        assert (await session.call_tool("write", {})).content[0].text == "write ok"  # type: ignore[union-attr]
    assert auth.flow.authorizations == 2
    assert auth.tokens is not None
    assert "tools:write" in (auth.tokens.scope or "").split()
