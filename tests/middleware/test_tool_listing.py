"""``filter_tools=True`` (docs/security.md T40): ``tools/list`` shows a caller only the tools its
token may call, in JSON answers and in event streams split anywhere; other answers and the
default (off) pass untouched."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpauth.middleware import ScopePolicy

from .helpers import FakeAuthorizationServer, bearer, client_for, rpc

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "read"}, {"name": "write"}, {"name": "admin"}]


def listing(id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": {"tools": TOOLS, "nextCursor": None}}


def sdk_like(mode: str) -> Any:
    """Answers tools/list (and anything else) the way the SDK's streamable HTTP app does:
    one JSON body, or an event stream sent in awkward pieces."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        answer = listing(request["id"]) if request["method"] == "tools/list" else {
            "jsonrpc": "2.0", "id": request["id"], "result": {"tools": TOOLS, "other": True}
        }  # fmt: skip
        if mode == "json":
            data = json.dumps(answer).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(data)),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": data})
            return
        event = b"event: message\r\ndata: " + json.dumps(answer).encode() + b"\r\n\r\n"
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for piece in (event[:7], event[7:40], event[40:]):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def names(response: Any) -> list[str]:
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return [tool["name"] for tool in json.loads(text)["result"]["tools"]]


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_caller_sees_only_the_tools_its_token_may_call(
    protect: Any, auth_server: FakeAuthorizationServer, mode: str
) -> None:
    middleware = protect(
        app=sdk_like(mode),
        filter_tools=True,
        policy=ScopePolicy(
            tools={"write": "files:write", "admin": "files:admin"},
            implies={"files:admin": "files:write"},
        ),
    )
    reader = bearer(auth_server.mint(scope="mcp:basic"))
    writer = bearer(auth_server.mint(scope="mcp:basic files:write"))
    admin = bearer(auth_server.mint(scope="files:admin"))
    async with client_for(middleware) as client:
        seen = {
            who: names(await client.post("/mcp", json=rpc("tools/list"), headers=headers))
            for who, headers in (("reader", reader), ("writer", writer), ("admin", admin))
        }
        other = await client.post("/mcp", json=rpc("tools/call", {"name": "read"}), headers=reader)
    assert seen == {
        "reader": ["read"],
        "writer": ["read", "write"],
        "admin": ["read", "write", "admin"],  # files:admin implies files:write
    }
    assert names(other) == ["read", "write", "admin"]  # only tools/list answers change


async def test_without_the_option_every_tool_is_listed(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect(app=sdk_like("json"), policy=ScopePolicy(tools={"write": "files:write"}))
    async with client_for(middleware) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint(scope="mcp:basic"))
        )
    assert names(response) == ["read", "write", "admin"]
