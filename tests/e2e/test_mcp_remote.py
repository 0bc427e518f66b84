"""`mcp-remote` (pinned in scripts/ensure-npm-peers.sh), the stdio bridge people put in clients that
only speak stdio, against a real `mcpauth demo`. The official MCP Python SDK's stdio client is the
local MCP client; it starts `node .npm-peers/node_modules/.bin/mcp-remote <url> <port>` as its
server, and mcp-remote opens its "browser", a person at Chromium (`tests/e2e/npm_clients.py`).

One story, each step a new mcp-remote process sharing one config folder (`MCP_REMOTE_CONFIG_DIR`):
the first start registers (DCR), signs in and consents in Chromium and calls `whoami`; the second
reuses the stored tokens without a browser; `reset_counter` needs `mcp:admin` and steps up in
Chromium; with its stored access token expired and refused, a fourth start refreshes with the
stored refresh token, again without a browser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ..support import free_port
from . import test_demo
from .chromium_opener import query
from .npm_clients import (
    banner_command,
    browser_env,
    installed_peers,
    npm_command,
    opener_trips,
)
from .test_demo import Demo, demo_user_id
from .test_sdk_oauth_client import claims, text

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

demo = test_demo.demo  # the fixture: `mcpauth demo` on free ports, for this module

ASKED = "Please authorize this client by visiting"  # what mcp-remote prints when it needs a browser


@dataclass
class Bridge:
    """Starts mcp-remote for the demo as a stdio MCP server, a new process each run."""

    command: list[str]
    env: dict[str, str]
    config: Path
    log: Path
    cwd: Path
    runs: int = 0

    async def call(self, *tools: str) -> tuple[list[str], str]:
        """Each tool's text through a fresh mcp-remote, and what that process printed (at most
        two minutes: a step-up waits for the person in Chromium)."""
        self.runs += 1
        errors = self.cwd / f"mcp-remote-{self.runs}.stderr"
        server = StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd
        )
        answers = []
        with errors.open("w") as errlog:
            with anyio.fail_after(120):
                async with (
                    stdio_client(server, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    for tool in tools:
                        answers.append(text(await session.call_tool(tool, {})))
        return answers, errors.read_text()

    def stored(self, kind: str) -> dict[str, Any]:
        """mcp-remote's stored ``tokens`` or ``client_info`` for the demo (one server)."""
        [path] = self.config.glob(f"*/*_{kind}.json")
        return dict(json.loads(path.read_text()))

    def store(self, kind: str, document: dict[str, Any]) -> None:
        [path] = self.config.glob(f"*/*_{kind}.json")
        path.write_text(json.dumps(document))


@pytest.fixture
def bridge(demo: Demo, tmp_path: Path) -> Bridge:
    peers = installed_peers()
    log = tmp_path / "opener.jsonl"
    env = browser_env(demo, log, tmp_path)
    config = tmp_path / "mcp-remote"
    env["MCP_REMOTE_CONFIG_DIR"] = str(config)
    # an explicit callback port, as the README allows, so that parallel runs never share one
    [url] = banner_command(demo, "npx mcp-remote")  # what the demo's banner tells people to run
    command = [*npm_command(peers, "mcp-remote"), url, str(free_port())]
    command += ["--auth-timeout", "60"]
    return Bridge(command, env, config, log, tmp_path)


async def test_mcp_remote_signs_in_in_chromium_reuses_its_tokens_steps_up_and_refreshes(
    demo: Demo, bridge: Bridge
) -> None:
    user_id = demo_user_id(demo)

    # 1: the first start: discovery, DCR, PKCE, the browser, the loopback callback, whoami
    [whoami], printed = await bridge.call("whoami")
    [first] = opener_trips(bridge.log, 1)
    assert not first["error"], first
    assert first["pages"] == ["login", "consent"]
    assert first["listener_closed"], "mcp-remote must be done while the browser stays open"
    params = first["params"]
    client_id = bridge.stored("client_info")["client_id"]
    assert params["client_id"] == client_id
    assert params["code_challenge_method"] == "S256"
    assert params["resource"] == demo.resource
    assert params["scope"] == "mcp:tools"  # the challenge's scope (not `openid email profile`)
    assert params["redirect_uri"].startswith("http://localhost:")  # it listens on 127.0.0.1
    callback = query(first["landed"])
    assert set(callback) == {"code", "state", "iss"}
    assert callback["iss"] == demo.issuer
    assert "MCP CLI Proxy" in first["consent_text"]
    assert printed.count(ASKED) == 1
    assert whoami == f"subject={user_id} client={client_id} scopes=mcp:tools"

    # 2: started again: the stored tokens, no browser
    [again], printed = await bridge.call("whoami")
    assert again == whoami
    assert ASKED not in printed
    assert len(opener_trips(bridge.log, 1, timeout=0)) == 1

    # 3: reset_counter needs mcp:admin: 403 insufficient_scope, consent again in Chromium (a
    # new browser process, so a sign-in first), and the same call succeeds
    [reset, widened], printed = await bridge.call("reset_counter", "whoami")
    _, step_up = opener_trips(bridge.log, 2)
    assert not step_up["error"], step_up
    assert step_up["pages"] == ["login", "consent"]
    assert set(step_up["params"]["scope"].split()) == {"mcp:tools", "mcp:admin"}
    assert step_up["params"]["client_id"] == client_id  # the stored registration, reused
    assert "mcp:admin" in step_up["consent_text"]
    assert printed.count(ASKED) == 1
    assert reset == "counter reset"
    assert widened.startswith(f"subject={user_id} client={client_id} scopes=")
    assert set(widened.split("scopes=")[1].split()) == {"mcp:tools", "mcp:admin"}

    # 4: the stored access token has expired (and the resource server refuses it): the next
    # start refreshes with the stored refresh token, no browser
    tokens = bridge.stored("tokens")
    head, _, signature = tokens["access_token"].rpartition(".")
    refused = {**tokens, "access_token": f"{head}.{signature[::-1]}", "expires_at": 1000}
    bridge.store("tokens", refused)
    [refreshed], printed = await bridge.call("whoami")
    assert refreshed == widened
    assert ASKED not in printed
    assert len(opener_trips(bridge.log, 2, timeout=0)) == 2
    renewed = bridge.stored("tokens")
    assert renewed["access_token"] not in (tokens["access_token"], refused["access_token"])
    assert renewed["refresh_token"] != tokens["refresh_token"]  # rotated by the refresh grant
    assert claims(renewed["access_token"])["sub"] == user_id
