"""Traces of protected requests, in process (spans kept in memory): a span per request, the
child of the caller's ``traceparent`` and the parent of what the application does, with the
MCP method, the tool, the decision and the error code, and never the token, the proof, a
cookie or the arguments."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from opentelemetry import trace

from mcpauth.middleware import ScopePolicy

from ..traces import PARENT_ID, TRACE_ID, TRACEPARENT, MemorySpans, memory_spans, no_credential_in
from .conftest import MiddlewareFactory
from .helpers import FakeAuthorizationServer, bearer, client_for, rpc

__all__ = ["memory_spans"]  # the fixture, used by name

pytestmark = pytest.mark.anyio
POLICY = ScopePolicy(required="mcp:basic", tools={"delete_file": "files:write"})
CALL = rpc("tools/call", {"name": "delete_file", "arguments": {"path": "/secret-argument"}}, 7)


class SpanRecordingApp:
    """Answers 200 (or ``status``), noting the span current while it ran."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.span_context: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        self.span_context = trace.get_current_span().get_span_context()
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def test_an_allowed_tools_call_is_a_span_of_the_callers_trace_around_the_application(
    protect: MiddlewareFactory, auth_server: FakeAuthorizationServer, memory_spans: MemorySpans
) -> None:
    app = SpanRecordingApp()
    token = auth_server.mint(client_id="client-7", scope="mcp:basic files:write")
    headers = {
        **bearer(token),
        "traceparent": TRACEPARENT,
        "mcp-protocol-version": "2025-11-25",
        "cookie": "session=cookie-value-0815",
    }
    async with client_for(protect(app=app, policy=POLICY)) as client:
        response = await client.post("/mcp?key=query-value-0815", json=CALL, headers=headers)
    assert response.status_code == 200
    span = memory_spans.named("POST /mcp")
    assert span.kind == "SERVER"
    assert (span.trace_id, span.parent_id) == (TRACE_ID, PARENT_ID)
    assert span.attributes == {
        "http.request.method": "POST",
        "url.scheme": "https",
        "url.path": "/mcp",
        "http.route": "/mcp",
        "mcp.protocol.version": "2025-11-25",
        "http.response.status_code": 200,
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "7",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "delete_file",
        "mcpauth.oauth.client_id": "client-7",
        "mcpauth.decision": "allowed",
    }
    # the application ran inside the span: its own spans are children of it
    assert format(app.span_context.trace_id, "032x") == TRACE_ID
    assert format(app.span_context.span_id, "016x") == span.span_id
    no_credential_in(
        [span],
        {
            "token": token,
            "cookie": "cookie-value-0815",
            "query": "query-value-0815",
            "argument": "secret-argument",
        },
    )


async def test_the_method_is_named_when_only_the_application_reads_the_body(
    protect: MiddlewareFactory, auth_server: FakeAuthorizationServer, memory_spans: MemorySpans
) -> None:
    async with client_for(protect()) as client:  # no per-tool rule: the policy reads nothing
        await client.post("/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint()))
    span = memory_spans.named("POST /mcp")
    assert span.attributes["mcp.method.name"] == "tools/list"
    assert "gen_ai.tool.name" not in span.attributes


REFUSALS = [
    ("no token", None, 401, "unauthorized", "invalid_token"),
    ("a forged token", "forged", 401, "unauthorized", "invalid_token"),
    ("a token without the tool's scope", "mcp:basic", 403, "forbidden", "insufficient_scope"),
]


@pytest.mark.parametrize(
    ("case", "token_scope", "status", "decision", "error"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
async def test_a_refusal_is_a_span_with_the_decision_and_error_code_and_never_the_credentials(
    protect: MiddlewareFactory,
    auth_server: FakeAuthorizationServer,
    memory_spans: MemorySpans,
    case: str,
    token_scope: str | None,
    status: int,
    decision: str,
    error: str,
) -> None:
    headers = {"DPoP": "proof-" + secrets.token_urlsafe(16)}
    if token_scope == "forged":
        headers.update(bearer(auth_server.mint()[:-4] + "AAAA"))
    elif token_scope is not None:
        headers.update(bearer(auth_server.mint(scope=token_scope)))
    async with client_for(protect(policy=POLICY)) as client:
        response = await client.post("/mcp", json=CALL, headers=headers)
    assert response.status_code == status
    span = memory_spans.named("POST /mcp")
    assert span.attributes["http.response.status_code"] == status
    assert span.attributes["mcpauth.decision"] == decision
    assert span.attributes["error.type"] == error
    assert "mcpauth.oauth.client_id" not in span.attributes
    secrets_sent = {"DPoP proof": headers["DPoP"]}
    if "Authorization" in headers:
        secrets_sent["token"] = headers["Authorization"].split()[1]
    no_credential_in([span], secrets_sent)


async def test_a_429_is_rate_limited_whoever_answered_it(
    protect: MiddlewareFactory, auth_server: FakeAuthorizationServer, memory_spans: MemorySpans
) -> None:
    async with client_for(protect(app=SpanRecordingApp(status=429))) as client:
        await client.post("/mcp", json=rpc("initialize"), headers=bearer(auth_server.mint()))
    span = memory_spans.named("POST /mcp")
    assert span.attributes["mcpauth.decision"] == "rate_limited"
    assert span.attributes["mcp.method.name"] == "initialize"


async def test_the_metadata_document_gets_a_span_without_a_decision(
    protect: MiddlewareFactory, memory_spans: MemorySpans
) -> None:
    async with client_for(protect()) as client:
        response = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    span = memory_spans.named("GET")
    assert span.attributes["url.path"] == "/.well-known/oauth-protected-resource/mcp"
    assert "mcpauth.decision" not in span.attributes


async def test_with_tracing_off_the_middleware_serves_requests_directly(
    protect: MiddlewareFactory,
) -> None:
    middleware = protect()
    assert middleware._serve_http == middleware._http
