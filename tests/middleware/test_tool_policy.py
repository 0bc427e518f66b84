"""``ProtectedResourceMiddleware(tool_policy=...)`` (docs/security.md T44): a Cedar policy lets
one group call a tool and denies it to another, and hides it in that group's ``tools/list``; a
denied call is a JSON-RPC error with the call's id (HTTP 200) and never reaches the
application; a Python policy, plain or async, sees the caller and the call; a policy that
raises or answers nonsense denies; with a policy the body is read even when the scopes cover
everything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpauth.middleware import (
    CedarPolicy,
    ScopePolicy,
    ToolCall,
    ToolCaller,
    ToolDecision,
)
from mcpauth.middleware.tool_calls import POLICY_DENIED

from .helpers import FakeAuthorizationServer, RecordingApp, bearer, client_for, rpc
from .test_tool_listing import names, sdk_like

pytestmark = pytest.mark.anyio

# TOOLS of test_tool_listing: read, write, admin
POLICY = """\
permit(principal, action == Action::"tools/call", resource == Tool::"read");
permit(principal in Group::"writers", action, resource == Tool::"write")
  when { context.arguments.path like "/tmp/*" };
permit(principal in Group::"admins", action, resource);
"""


def call(tool: str, arguments: dict[str, Any] | None = None, id: int = 7) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool}
    if arguments is not None:
        params["arguments"] = arguments
    return rpc("tools/call", params, id=id)


def denied(id: Any, tool: str, reason: str = "") -> dict[str, Any]:
    message = f"Calling the tool {tool!r} is not allowed" + (f": {reason}" if reason else "")
    return {"jsonrpc": "2.0", "id": id, "error": {"code": POLICY_DENIED, "message": message}}


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_cedar_policy_shows_each_group_the_tools_it_may_call(
    protect: Any, auth_server: FakeAuthorizationServer, mode: str
) -> None:
    middleware = protect(app=sdk_like(mode), tool_policy=CedarPolicy(POLICY))
    seen = {}
    async with client_for(middleware) as client:
        for who, groups in (("reader", None), ("writer", ["writers"]), ("admin", ["admins"])):
            token = auth_server.mint(sub=who, groups=groups)
            response = await client.post("/mcp", json=rpc("tools/list"), headers=bearer(token))
            assert response.status_code == 200
            seen[who] = names(response)
    # write depends on an argument: shown to writers, whose calls are decided one by one
    assert seen == {
        "reader": ["read"],
        "writer": ["read", "write"],
        "admin": ["read", "write", "admin"],
    }


async def test_a_cedar_policy_allows_a_tool_for_one_group_and_denies_it_for_another(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(tool_policy=CedarPolicy(POLICY))
    writer = bearer(auth_server.mint(sub="w", groups=["writers"]))
    reader = bearer(auth_server.mint(sub="r", groups=["readers"]))
    async with client_for(middleware) as client:
        allowed = await client.post("/mcp", json=call("write", {"path": "/tmp/a"}), headers=writer)
        elsewhere = await client.post(
            "/mcp", json=call("write", {"path": "/etc/a"}), headers=writer
        )
        other_group = await client.post(
            "/mcp", json=call("write", {"path": "/tmp/a"}, id=9), headers=reader
        )
        no_arguments = await client.post("/mcp", json=call("write"), headers=writer)
        read = await client.post("/mcp", json=call("read"), headers=reader)
    assert allowed.status_code == 200
    assert json.loads(allowed.json()["body"])["params"]["arguments"] == {"path": "/tmp/a"}
    assert (elsewhere.status_code, elsewhere.json()) == (200, denied(7, "write"))
    assert (other_group.status_code, other_group.json()) == (200, denied(9, "write"))
    assert no_arguments.json() == denied(7, "write")  # reading a missing argument: an error
    assert elsewhere.headers["content-type"] == "application/json"
    assert read.status_code == 200
    assert [json.loads(c["body"])["params"]["name"] for c in recording_app.calls] == [
        "write",
        "read",
    ]  # the denied calls never reached the application


async def test_a_python_policy_sees_the_caller_and_the_call(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    seen: list[tuple[ToolCaller, ToolCall]] = []

    async def policy(caller: ToolCaller, call: ToolCall) -> ToolDecision:
        seen.append((caller, call))
        if call.arguments is not None and call.arguments.get("size", 0) > 10:
            return ToolDecision(False, "size is limited to 10")
        return ToolDecision(True)

    middleware = protect(tool_policy=policy)
    token = auth_server.mint(
        sub="alice", client_id="app", scope="mcp:basic files", groups=["a", "b"]
    )
    async with client_for(middleware) as client:
        small = await client.post("/mcp", json=call("make", {"size": 3}), headers=bearer(token))
        large = await client.post("/mcp", json=call("make", {"size": 11}), headers=bearer(token))
    assert small.status_code == 200
    assert large.json() == denied(7, "make", "size is limited to 10")
    caller, made = seen[0]
    assert (caller.subject, caller.client_id, caller.issuer) == ("alice", "app", auth_server.issuer)
    assert caller.groups == {"a", "b"}
    assert caller.scopes == {"mcp:basic", "files"}
    assert caller.dpop_bound is False
    assert caller.claims["sub"] == "alice"
    assert (made.name, dict(made.arguments or {})) == ("make", {"size": 3})
    assert len(recording_app.calls) == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda caller, call: 1 / 0, id="raises"),
        pytest.param(lambda caller, call: "yes", id="answers-a-string"),
        pytest.param(lambda caller, call: None, id="answers-nothing"),
    ],
)
async def test_a_policy_that_fails_denies_and_is_logged(
    protect: Any,
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    caplog: pytest.LogCaptureFixture,
    answer: Any,
) -> None:
    token = auth_server.mint()
    async with client_for(protect(tool_policy=answer)) as client:
        response = await client.post("/mcp", json=call("read"), headers=bearer(token))
    assert response.json() == denied(7, "read")
    assert not recording_app.calls
    assert "tool policy" in caplog.text
    assert token not in caplog.text


async def test_a_policy_that_fails_on_a_listing_hides_every_tool(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    class Broken:
        def __call__(self, caller: ToolCaller, call: ToolCall) -> bool:
            return True

        def visible(self, caller: ToolCaller, names: Any) -> set[str]:
            raise RuntimeError("the policy store is down")

    middleware = protect(app=sdk_like("json"), tool_policy=Broken())
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint())
        )
    assert names(response) == []


async def test_a_plain_policy_is_asked_about_each_listed_tool_without_arguments(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    asked: list[ToolCall] = []

    def policy(caller: ToolCaller, call: ToolCall) -> bool:
        asked.append(call)
        return call.name != "admin"

    middleware = protect(app=sdk_like("json"), tool_policy=policy)
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint())
        )
    assert names(response) == ["read", "write"]
    assert sorted(c.name for c in asked) == ["admin", "read", "write"]
    assert all(c.arguments is None for c in asked)


async def test_the_scope_filter_and_the_policy_both_hide(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect(
        app=sdk_like("json"),
        filter_tools=True,
        policy=ScopePolicy(tools={"write": "files:write"}),
        tool_policy=lambda caller, call: call.name != "admin",
    )
    async with client_for(middleware) as client:
        without = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint(scope="mcp:basic"))
        )
        scoped = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint(scope="files:write"))
        )
    assert names(without) == ["read"]
    assert names(scoped) == ["read", "write"]


async def test_with_a_policy_the_body_is_read_even_when_the_scopes_cover_everything(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(
        policy=ScopePolicy(tools={"write": "files:write"}),
        tool_policy=lambda caller, call: call.name != "write",
    )
    token = auth_server.mint(scope="mcp:basic files:write")  # covers every scope rule
    async with client_for(middleware) as client:
        refused = await client.post("/mcp", json=call("write"), headers=bearer(token))
    assert refused.json() == denied(7, "write")
    assert not recording_app.calls


async def test_the_scopes_are_checked_before_the_policy(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    asked: list[str] = []

    def policy(caller: ToolCaller, call: ToolCall) -> bool:
        asked.append(call.name)
        return True

    middleware = protect(policy=ScopePolicy(tools={"write": "files:write"}), tool_policy=policy)
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=call("write"), headers=bearer(auth_server.mint(scope="mcp:basic"))
        )
    assert response.status_code == 403  # insufficient_scope: a new token would do
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert asked == []


async def test_a_denied_call_in_a_batch_refuses_the_batch_answering_each_request(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(tool_policy=lambda caller, call: call.name == "read")
    batch = [
        call("read", id=1),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        call("admin", id=2),
        rpc("ping", id=3),
    ]
    async with client_for(middleware) as client:
        response = await client.post("/mcp", json=batch, headers=bearer(auth_server.mint()))
    busy = {"code": -32000, "message": "Not processed: another request of this batch was refused"}
    assert response.json() == [
        {"jsonrpc": "2.0", "id": 1, "error": busy},
        denied(2, "admin"),
        {"jsonrpc": "2.0", "id": 3, "error": busy},
    ]
    assert not recording_app.calls


@pytest.mark.parametrize(
    "params",
    [None, {"arguments": {}}, {"name": 5}, {"name": "read", "arguments": ["a"]}],
    ids=["no-params", "no-name", "name-not-a-string", "arguments-not-an-object"],
)
async def test_a_tool_call_the_policy_cannot_read_is_denied(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp, params: Any
) -> None:
    middleware = protect(tool_policy=lambda caller, call: True)
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/call", params), headers=bearer(auth_server.mint())
        )
    assert response.json()["error"] == {
        "code": POLICY_DENIED,
        "message": "The tool call has no tool name or its arguments are no object",
    }
    assert not recording_app.calls


async def test_a_long_tool_name_is_cut_in_the_message(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect(tool_policy=lambda caller, call: False)
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=call("x" * 5000), headers=bearer(auth_server.mint())
        )
    message = response.json()["error"]["message"]
    assert message == f"Calling the tool {'x' * 64 + '…'!r} is not allowed"


async def test_a_tool_policy_must_be_callable(protect: Any) -> None:
    with pytest.raises(TypeError, match="tool_policy must be a callable"):
        protect(tool_policy="tools.cedar")


async def test_without_a_policy_or_tool_limits_no_body_is_read_for_them(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect()
    assert middleware._tool_calls is None
    assert not middleware._lists_filtered
