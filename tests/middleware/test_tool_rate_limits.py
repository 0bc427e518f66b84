"""Per-user and per-tool limits on tool calls (``Limits(user_rate=, tool_rates=)``, docs/security.md
T44): a call over a limit gets 429 with ``Retry-After`` and a JSON-RPC error with the call's id
naming the limit, and never reaches the application; users and tools have their own buckets;
a call refused by the policy or by one limit takes nothing from the others; only ``tools/call``
is counted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpauth.middleware import DPoP, Limits, Rate

from .helpers import FakeAuthorizationServer, RecordingApp, bearer, client_for, rpc
from .test_tool_policy import call

pytestmark = pytest.mark.anyio
# the middleware's clock (the buckets read it): still, so that Retry-After is exact
STILL = DPoP(clock=lambda: 1_700_000_000.0)


def too_many(response: Any, id: int, message: str) -> None:
    assert response.status_code == 429
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32000, "message": message},
    }


async def test_a_user_over_its_limit_gets_429_with_retry_after_whatever_the_tool(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(limits=Limits(user_rate=Rate(2, per=60)), dpop=STILL)
    alice = bearer(auth_server.mint(sub="alice"))
    # the same user through another client: one user, one bucket
    alice_elsewhere = bearer(auth_server.mint(sub="alice", client_id="client-2"))
    bob = bearer(auth_server.mint(sub="bob"))
    async with client_for(middleware) as client:
        first = await client.post("/mcp", json=call("read", id=1), headers=alice)
        second = await client.post("/mcp", json=call("write", id=2), headers=alice_elsewhere)
        over = await client.post("/mcp", json=call("admin", id=3), headers=alice)
        other_user = await client.post("/mcp", json=call("read", id=4), headers=bob)
        not_a_call = await client.post("/mcp", json=rpc("tools/list"), headers=alice)
    assert (first.status_code, second.status_code) == (200, 200)
    too_many(over, 3, "Too many tool calls; retry after 30 seconds")
    assert over.headers["Retry-After"] == "30"
    assert over.headers["content-type"] == "application/json"
    assert other_user.status_code == 200
    assert not_a_call.status_code == 200  # only tools/call is counted
    called = [json.loads(c["body"]).get("id") for c in recording_app.calls]
    assert called == [1, 2, 4, 1]


async def test_a_tool_over_its_limit_gets_429_and_other_tools_go_on(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(
        limits=Limits(
            user_rate=Rate(100, per=60),
            tool_rates={"search": Rate(1, per=10), "*": Rate(5, per=60)},
        ),
        dpop=STILL,
    )
    alice = bearer(auth_server.mint(sub="alice"))
    bob = bearer(auth_server.mint(sub="bob"))
    async with client_for(middleware) as client:
        first = await client.post("/mcp", json=call("search", id=1), headers=alice)
        over = await client.post("/mcp", json=call("search", id=2), headers=alice)
        other_tool = await client.post("/mcp", json=call("read", id=3), headers=alice)
        other_user = await client.post("/mcp", json=call("search", id=4), headers=bob)
    assert first.status_code == 200
    too_many(over, 2, "Too many calls of the tool 'search'; retry after 10 seconds")
    assert over.headers["Retry-After"] == "10"
    assert (other_tool.status_code, other_user.status_code) == (200, 200)
    assert len(recording_app.calls) == 3


async def test_a_call_refused_takes_nothing_from_the_other_limits(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect(
        limits=Limits(user_rate=Rate(2, per=60), tool_rates={"search": Rate(1, per=60)}),
        tool_policy=lambda caller, call: call.name != "admin",
    )
    alice = bearer(auth_server.mint(sub="alice"))
    async with client_for(middleware) as client:
        statuses = [
            (await client.post("/mcp", json=call(tool), headers=alice)).status_code
            for tool in ("admin", "admin", "search", "search", "search", "read", "read")
        ]
    # two denials (200 with an error) and two refused searches cost the user nothing: the
    # user's two tokens go to the first search and the first read
    assert statuses == [200, 200, 200, 429, 429, 200, 429]


async def test_without_tool_limits_calls_are_not_counted(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect(limits=Limits(rate_limit=1000))
    assert middleware._tool_calls is None
    async with client_for(middleware) as client:
        statuses = {
            (
                await client.post("/mcp", json=call("read"), headers=bearer(auth_server.mint()))
            ).status_code
            for _ in range(10)
        }
    assert statuses == {200}
