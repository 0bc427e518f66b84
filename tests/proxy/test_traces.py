"""Traces through the HTTP proxy, in process (spans kept in memory): the upstream request is a
CLIENT span under the protected request's span, and its ``traceparent`` carries that trace to
the upstream in place of the caller's; with tracing off the caller's passes unchanged."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.proxy.upstream import UpstreamProxy
from tests.middleware.helpers import (
    ISSUER,
    RESOURCE,
    FakeAuthorizationServer,
    bearer,
    client_for,
    rpc,
)

from ..traces import PARENT_ID, TRACE_ID, TRACEPARENT, MemorySpans, memory_spans, no_credential_in

__all__ = ["memory_spans"]  # the fixture, used by name

pytestmark = pytest.mark.anyio


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"headers": dict(request.headers)})


upstream_app = Starlette(routes=[Route("/upstream/mcp", echo, methods=["POST"])])


def protected_proxy(as_http: httpx2.AsyncClient, transport: httpx2.AsyncBaseTransport) -> Any:
    proxy = UpstreamProxy(
        "http://upstream.internal/upstream/mcp",
        path="/mcp",
        client=httpx2.AsyncClient(transport=transport),
    )
    return ProtectedResourceMiddleware(
        proxy, resource=RESOURCE, authorization_servers=[ISSUER], http_client=as_http
    )


async def test_the_upstream_request_is_a_client_span_whose_traceparent_goes_upstream(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    token = auth_server.mint(client_id="c1")
    app = protected_proxy(as_http, httpx2.ASGITransport(upstream_app))
    async with client_for(app) as client:
        response = await client.post(
            "/mcp?key=query-value-1234",
            json=rpc("tools/list"),
            headers={**bearer(token), "traceparent": TRACEPARENT, "tracestate": "vendor=state"},
        )
    assert response.status_code == 200
    received = response.json()["headers"]
    server = memory_spans.named("POST /mcp")
    upstream = memory_spans.named("POST")
    assert (server.trace_id, server.parent_id) == (TRACE_ID, PARENT_ID)
    assert upstream.kind == "CLIENT"
    assert (upstream.trace_id, upstream.parent_id) == (TRACE_ID, server.span_id)
    assert received["traceparent"] == f"00-{TRACE_ID}-{upstream.span_id}-01"
    assert received.get("tracestate") == "vendor=state"  # carried on by the propagator
    assert upstream.attributes == {
        "http.request.method": "POST",
        "server.address": "upstream.internal",
        "url.full": "http://upstream.internal/upstream/mcp",
        "http.response.status_code": 200,
    }
    no_credential_in(memory_spans.spans(), {"token": token, "query": "query-value-1234"})


async def test_a_failed_upstream_request_is_a_client_span_with_the_failures_type(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    app = protected_proxy(as_http, httpx2.MockTransport(refuse))
    async with client_for(app) as client:
        response = await client.post("/mcp", json=rpc("ping"), headers=bearer(auth_server.mint()))
    assert response.status_code == 502
    assert memory_spans.named("POST").attributes["error.type"] == "ConnectError"
    server = memory_spans.named("POST /mcp")
    assert server.attributes["http.response.status_code"] == 502
    assert server.attributes["mcpauth.decision"] == "allowed"


async def test_with_tracing_off_the_callers_traceparent_goes_upstream_unchanged(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    app = protected_proxy(as_http, httpx2.ASGITransport(upstream_app))
    async with client_for(app) as client:
        response = await client.post(
            "/mcp",
            json=rpc("tools/list"),
            headers={**bearer(auth_server.mint()), "traceparent": TRACEPARENT},
        )
    assert response.json()["headers"]["traceparent"] == TRACEPARENT
