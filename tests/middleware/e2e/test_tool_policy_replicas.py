"""``mcpauth proxy --policy --user-rate-limit --tool-rate-limit`` as real processes in front of
the official SDK server, two replicas on one real Redis (docs/security.md T44). The official SDK
client sees only the tools the Cedar policy lets its user call, and a denied call fails with the
policy's message; a user's bucket and a (user, tool) bucket are shared by both replicas, whose
429s carry ``Retry-After`` and a JSON-RPC error with the call's id; Redis keeps no subject or
tool name in the clear."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from mcpauth import jwt
from tests.proxy.test_stdio_limits import INITIALIZE
from tests.proxy.test_stdio_limits import MCP_HEADERS as ACCEPT
from tests.redis_server import RedisServer, SilentListener

from .conftest import Process, Spawner
from .test_sdk_end_to_end import call_tools, mint

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

USER_BURST = 4
POLICY = """\
// every tool but delete_file for everyone
permit(principal, action == Action::"tools/call", resource)
  unless { resource == Tool::"delete_file" };
// delete_file: administrators, and only under /tmp
permit(
  principal in Group::"admins", action == Action::"tools/call", resource == Tool::"delete_file"
) when { context.arguments.path like "/tmp/*" };
"""
DENIED = "Calling the tool 'delete_file' is not allowed"


@dataclass
class Replicas:
    key: jwt.PrivateKey
    issuer: str
    resource: str
    first: str
    second: str
    redis: RedisServer

    def token(self, sub: str, **claims: Any) -> str:
        return mint(self.key, self.issuer, self.resource, sub=sub, **claims)


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    root = tmp_path_factory.mktemp("tool-policy")
    key = jwt.generate_private_key("ES256")
    (root / "key.pem").write_bytes(jwt.private_key_to_pem(key))
    (root / "tools.cedar").write_text(POLICY)
    spawn = Spawner()
    try:
        issuer = spawn("as", "--issuer", "{url}", "--key-file", str(root / "key.pem")).url
        upstream = spawn("mcp", "--unprotected", path="/mcp").url
        options = [
            "--authorization-server", issuer, "--upstream", upstream,
            "--policy", str(root / "tools.cedar"),
            "--user-rate-limit", f"{USER_BURST}/h", "--tool-rate-limit", "count=1/h",
            "--shared-state", redis_server.url, "--shared-state-timeout", "2",
        ]  # fmt: skip
        first = spawn("--resource", "{url}/mcp", *options, module="mcpauth.proxy.cli", path="/mcp")
        second = spawn("--resource", first.url, *options, module="mcpauth.proxy.cli", path="/mcp")
        yield Replicas(key, issuer, first.url, first.url, second.url, redis_server)
    finally:
        spawn.close()


async def test_the_sdk_client_sees_and_calls_only_what_the_policy_allows_its_group(
    replicas: Replicas,
) -> None:
    admin = replicas.token("root", groups=["admins"])
    tools, deleted, refused, _ = await call_tools(
        replicas.first,
        admin,
        [("delete_file", {"path": "/tmp/x"}), ("delete_file", {"path": "/etc/passwd"})],
    )
    assert "delete_file" in tools
    assert deleted == "deleted /tmp/x"
    assert isinstance(refused, Exception)
    assert DENIED in str(refused)
    user = replicas.token("user", groups=["staff"])
    tools, who, refused, statuses = await call_tools(
        replicas.second, user, [("identity", {}), ("delete_file", {"path": "/tmp/x"})]
    )
    assert "delete_file" not in tools
    assert {"whoami", "count", "identity"} <= set(tools)
    assert who.startswith("user|e2e-client|")  # what the proxy told the upstream
    assert isinstance(refused, Exception)
    assert DENIED in str(refused)
    assert all(status == 200 for status, _ in statuses if status != 202)


class Session:
    """An MCP session of one user at one replica, calling tools with raw HTTP."""

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self.http, self.url = http, url
        self.headers = {**ACCEPT, "Authorization": f"Bearer {token}"}

    async def open(self) -> Session:
        opened = await self.http.post(self.url, json=INITIALIZE, headers=self.headers)
        assert opened.status_code == 200, opened.text
        self.headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        self.headers["Mcp-Protocol-Version"] = INITIALIZE["params"]["protocolVersion"]
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.http.post(self.url, json=ready, headers=self.headers)).is_success
        return self

    async def call(self, id: int, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
        message = {"jsonrpc": "2.0", "id": id, "method": "tools/call"}
        message["params"] = {"name": tool, "arguments": arguments}
        return await self.http.post(self.url, json=message, headers=self.headers)


def assert_too_many(response: httpx2.Response, id: int, message: str) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["Retry-After"]) <= 3600
    body = response.json()
    assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", id, -32000)
    assert body["error"]["message"].startswith(message)


async def test_a_users_bucket_is_shared_by_both_replicas(replicas: Replicas) -> None:
    token = replicas.token("counted-user")
    async with httpx2.AsyncClient(timeout=30) as http:
        sessions = [
            await Session(http, url, token).open() for url in (replicas.first, replicas.second)
        ]
        within = [await sessions[i % 2].call(i, "whoami", {}) for i in range(USER_BURST)]
        over = [await session.call(10 + i, "whoami", {}) for i, session in enumerate(sessions)]
        other = await (await Session(http, replicas.second, replicas.token("other")).open()).call(
            20, "whoami", {}
        )
    assert [r.status_code for r in within] == [200] * USER_BURST
    for i, refused in enumerate(over):
        assert_too_many(refused, 10 + i, "Too many tool calls; retry after")
    assert other.status_code == 200  # each user has a bucket of its own


async def test_a_tools_bucket_is_shared_by_both_replicas_and_keeps_no_name(
    replicas: Replicas,
) -> None:
    token = replicas.token("secret-subject")
    async with httpx2.AsyncClient(timeout=30) as http:
        first = await Session(http, replicas.first, token).open()
        second = await Session(http, replicas.second, token).open()
        counted = await first.call(1, "count", {"n": 1})
        again = await second.call(2, "count", {"n": 1})
        other_tool = await second.call(3, "whoami", {})
    assert counted.status_code == 200, counted.text
    assert_too_many(again, 2, "Too many calls of the tool 'count'; retry after")
    assert other_tool.status_code == 200
    with replicas.redis.client() as client:
        keys = [bytes(k) for k in client.keys("*:bucket:*")]
        stored = keys + [bytes(v) for k in keys for v in client.hvals(k)]
    assert keys  # the buckets are in Redis
    for value in stored:
        for name in (b"secret-subject", b"count", b"whoami", token.encode()):
            assert name not in value


async def test_a_redis_that_never_answers_refuses_tool_calls_within_the_timeout(
    spawn: Callable[..., Process], replicas: Replicas, silent_redis: SilentListener
) -> None:
    timeout = 0.3
    upstream = spawn("mcp", "--unprotected", path="/mcp").url
    proxy = spawn(
        "--resource", "{url}/mcp", "--authorization-server", replicas.issuer,
        "--upstream", upstream, "--user-rate-limit", "100/min",
        "--shared-state", silent_redis.url, "--shared-state-timeout", str(timeout),
        module="mcpauth.proxy.cli", path="/mcp",
    )  # fmt: skip
    token = mint(replicas.key, replicas.issuer, proxy.url, sub="waiting")
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Session(http, proxy.url, token).open()  # no tool call: no Redis
        started = time.monotonic()
        hung = await session.call(1, "whoami", {})
        elapsed = time.monotonic() - started
    assert hung.status_code == 503
    assert hung.headers["Retry-After"] == "1"
    assert hung.json()["error"] == {
        "code": -32000,
        "message": "Requests cannot be counted right now; retry shortly",
    }
    assert silent_redis.accepted
    assert timeout <= elapsed < timeout + 2.5, elapsed
