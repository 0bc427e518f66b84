"""Scope policy over the JSON-RPC body (MCP RS-12..RS-16): per method, per tool, resource and
prompt, hierarchies, batches; the body reaches the app unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpauth.middleware import Limits, ScopePolicy
from mcpauth.middleware.policy import MalformedRequest, parse_jsonrpc

from .helpers import FakeAuthorizationServer, RecordingApp, bearer, client_for, rpc

pytestmark = pytest.mark.anyio

POLICY: dict[str, Any] = {
    "policy": ScopePolicy(
        required="mcp:basic",
        methods={"resources/list": "files:read"},
        tools={"delete_file": ["files:write", "files:delete"], "read_file": "files:read"},
        resources={"file:///secret": "secrets:read"},
        prompts={"admin_prompt": "admin"},
        implies={"files:admin": ["files:write", "files:delete", "files:read"]},
    )
}


def call(name: str, id: int = 1) -> dict[str, Any]:
    return rpc("tools/call", {"name": name, "arguments": {}}, id=id)


def challenged_scopes(response: Any) -> set[str]:
    header = response.headers["www-authenticate"]
    value = header.split('scope="', 1)[1].split('"', 1)[0]
    return set(value.split())


CASES = [
    ("tools/list needs only the base scope", rpc("tools/list"), "mcp:basic", None),
    (
        "a tool with its own scope",
        call("delete_file"),
        "mcp:basic files:write",
        {"mcp:basic", "files:write", "files:delete"},
    ),
    (
        "a resource by uri",
        rpc("resources/read", {"uri": "file:///secret"}),
        "mcp:basic",
        {"mcp:basic", "secrets:read"},
    ),
    (
        "a prompt by name",
        rpc("prompts/get", {"name": "admin_prompt"}),
        "mcp:basic",
        {"mcp:basic", "admin"},
    ),
    ("a method", rpc("resources/list"), "mcp:basic", {"mcp:basic", "files:read"}),
    (
        "a batch needs the union rs_14",
        [call("read_file"), call("delete_file", 2)],
        "mcp:basic files:read",
        {"mcp:basic", "files:read", "files:write", "files:delete"},
    ),
    ("no base scope", rpc("tools/list"), "other", {"mcp:basic"}),
]


@pytest.mark.parametrize(
    ("body", "granted", "challenged"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_every_scope_the_operation_needs_is_challenged_at_once_rs_13_rs_14(
    body: Any,
    granted: str,
    challenged: set[str] | None,
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    protect: Any,
) -> None:
    async with client_for(protect(**POLICY)) as client:
        response = await client.post(
            "/mcp", json=body, headers=bearer(auth_server.mint(scope=granted))
        )
    if challenged is None:
        assert response.status_code == 200
        return
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert challenged_scopes(response) == challenged
    assert recording_app.calls == []


async def test_a_broad_scope_implies_the_narrower_ones_rs_16(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    token = auth_server.mint(scope="mcp:basic files:admin")
    async with client_for(protect(**POLICY)) as client:
        response = await client.post("/mcp", json=call("delete_file"), headers=bearer(token))
    assert response.status_code == 200


def test_hierarchies_are_transitive_and_do_not_loop() -> None:
    policy = ScopePolicy(implies={"a": "b", "b": "c", "c": "a"})
    assert policy.effective(["a"]) == {"a", "b", "c"}
    assert policy.missing(["b"], ["c", "d"]) == {"d"}


async def test_the_body_reaches_the_app_byte_for_byte(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    raw = b'{ "jsonrpc":"2.0",  "id":7, "method":"tools/call", "params":{"name":"read_file"} }'
    token = auth_server.mint(scope="mcp:basic files:read")
    async with client_for(protect(**POLICY)) as client:
        response = await client.post(
            "/mcp", content=raw, headers={**bearer(token), "Content-Type": "application/json"}
        )
    assert response.status_code == 200
    assert recording_app.calls[0]["body"] == raw.decode()


async def test_duplicate_members_are_refused_so_parsers_cannot_disagree(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    raw = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"read_file","name":"delete_file"}}'
    )
    token = auth_server.mint(scope="mcp:basic files:read")
    async with client_for(protect(**POLICY)) as client:
        response = await client.post("/mcp", content=raw, headers=bearer(token))
    assert response.status_code == 400
    assert recording_app.calls == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"b":2,"a":3}',
        b'[{"method":"x"},{"method":"y","method":"z"}]',
        b'{"params":{"arguments":{"k":1,"k":2}}}',
    ],
)
def test_a_duplicate_member_at_any_depth_is_named(body: bytes) -> None:
    with pytest.raises(MalformedRequest, match=r"duplicate member '(a|method|k)'"):
        parse_jsonrpc(body)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
def test_a_body_is_read_in_any_encoding_json_reads(encoding: str) -> None:
    message = call("read_file") | {"note": "caf\u00e9"}
    assert parse_jsonrpc(json.dumps(message).encode(encoding)) == [message]


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b"42", b"[" * 100_000])
async def test_an_unparseable_body_is_refused_when_scopes_depend_on_it(
    raw: bytes, auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    async with client_for(protect(**POLICY)) as client:
        response = await client.post("/mcp", content=raw, headers=bearer(auth_server.mint()))
    assert response.status_code == 400
    assert recording_app.calls == []


async def test_an_oversized_body_is_refused_with_413(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    body = json.dumps(call("read_file") | {"pad": "x" * 2000}).encode()

    async def chunks() -> Any:
        yield body[:500]
        yield body[500:]

    async with client_for(protect(limits=Limits(max_body_bytes=1000), **POLICY)) as client:
        response = await client.post("/mcp", content=body, headers=bearer(auth_server.mint()))
        chunked = await client.post("/mcp", content=chunks(), headers=bearer(auth_server.mint()))
    assert (response.status_code, chunked.status_code) == (413, 413)
    assert recording_app.calls == []


async def test_without_per_operation_rules_the_body_is_not_read(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    async with client_for(protect(policy=ScopePolicy(required="mcp:basic"))) as client:
        response = await client.post(
            "/mcp", content=b"{not json", headers=bearer(auth_server.mint())
        )
    assert response.status_code == 200
    assert recording_app.calls[0]["body"] == "{not json"


def test_a_policy_covers_a_grant_holding_every_scope_it_names() -> None:
    policy = POLICY["policy"]
    everything = ["mcp:basic", "files:admin", "secrets:read", "admin"]  # files:* implied
    assert policy.covers(everything)
    assert not policy.covers(everything[:-1])
    assert not policy.covers(["files:admin", "secrets:read", "admin"])  # no mcp:basic
    assert ScopePolicy(required="a").covers(["a"])


async def test_the_body_of_a_caller_the_policy_covers_is_not_read(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    # no decision depends on it: whatever it names, this caller holds the scope
    token = auth_server.mint(scope="mcp:basic files:admin secrets:read admin")
    async with client_for(protect(**POLICY)) as client:
        response = await client.post("/mcp", content=b"{not json", headers=bearer(token))
        short = await client.post("/mcp", content=b"{not json", headers=bearer(auth_server.mint()))
    assert (response.status_code, short.status_code) == (200, 400)
    assert [call["body"] for call in recording_app.calls] == ["{not json"]


async def test_get_and_delete_need_the_base_scopes_only(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    async with client_for(protect(**POLICY)) as client:
        ok = await client.get("/mcp", headers=bearer(auth_server.mint()))
        refused = await client.get("/mcp", headers=bearer(auth_server.mint(scope="x")))
    assert (ok.status_code, refused.status_code) == (200, 403)
