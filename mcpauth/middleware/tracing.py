"""Traces of protected requests, when :mod:`mcpauth.tracing` turns them on (imported only
then): a SERVER span per HTTP request, the child of the caller's ``traceparent`` and the
current span while the application (or the proxy's upstream request) runs.

Each span carries the method, path and status; the MCP method (``mcp.method.name``), the tool
of a ``tools/call`` (``gen_ai.tool.name``) and the JSON-RPC id when the body was read (by the
scope policy or by the application: the body is never read for the span's sake, so a refused
request whose body nobody read has none); the protocol version header; the decision
(``mcpauth.decision``: ``allowed``, ``unauthorized`` (401), ``forbidden`` (403),
``rate_limited`` (429, the middleware's or the application's, such as the stdio bridge's
session caps) or ``refused`` (any other refusal: 400, 404, 413, 503)); the error code
(``error.type``: the OAuth or JSON-RPC error code of the response); and the token's client id.
Never the token, the proof, another header, the arguments or the query string. The metadata
document and CORS preflights get a span without a decision.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span, StatusCode, Tracer

from mcpauth.middleware._asgi import ASGIApp, Receive, Scope, Send, first_header
from mcpauth.middleware.identity import verified_token
from mcpauth.middleware.policy import MalformedRequest, parse_jsonrpc
from mcpauth.tracing.asgi import (
    ERROR_TYPE,
    HTTP_METHOD,
    HTTP_ROUTE,
    HTTP_STATUS,
    URL_PATH,
    Observed,
    error_code,
    printable,
    request_attributes,
    server_span,
)

__all__ = ["TracedRequests"]

# OpenTelemetry semantic conventions for MCP (opentelemetry-semantic-conventions,
# ``mcp_attributes``, ``gen_ai_attributes``, ``jsonrpc_attributes``)
MCP_METHOD = "mcp.method.name"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
TOOL_NAME = "gen_ai.tool.name"
OPERATION = "gen_ai.operation.name"
JSONRPC_ID = "jsonrpc.request.id"
# mcpauth's own
DECISION = "mcpauth.decision"
CLIENT_ID = "mcpauth.oauth.client_id"

_PROTOCOL_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class TracedRequests:
    """``handle`` (the middleware's request handling) with a span around each request."""

    def __init__(
        self,
        handle: ASGIApp,
        tracer: Tracer,
        *,
        route: str,
        body_limit: int,
        unprotected: Callable[[Scope], bool],
    ) -> None:
        self.handle = handle
        self.tracer = tracer
        self.route = route.rstrip("/") or "/"
        self.body_limit = body_limit
        self.unprotected = unprotected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        protected = not self.unprotected(scope)
        observed = Observed(
            receive, send, keep_request=self.body_limit if scope.get("method") == "POST" else 0
        )
        attributes = self._attributes(scope)
        name = str(attributes[HTTP_METHOD])
        if HTTP_ROUTE in attributes:
            name += f" {self.route}"
        with server_span(self.tracer, scope, name, attributes) as span:
            try:
                await self.handle(scope, observed.receive, observed.send)
            finally:
                _annotate(span, scope, observed, protected=protected)

    def _attributes(self, scope: Scope) -> dict[str, Any]:
        attributes = request_attributes(scope)
        path = printable(scope.get("path"), 512)
        if path is not None:
            attributes[URL_PATH] = path
            if (path.rstrip("/") or "/") == self.route:
                attributes[HTTP_ROUTE] = self.route
        version = first_header(scope, b"mcp-protocol-version")
        if version is not None and _PROTOCOL_VERSION.match(version):
            attributes[MCP_PROTOCOL_VERSION] = version
        return attributes


def _annotate(span: Span, scope: Scope, observed: Observed, *, protected: bool) -> None:
    status = observed.status
    if status is not None:
        span.set_attribute(HTTP_STATUS, status)
        if status >= 500:
            span.set_status(StatusCode.ERROR)
    for name, value in _jsonrpc(observed).items():
        span.set_attribute(name, value)
    token = verified_token(scope)
    if token is not None:
        client_id = printable(token.client_id)
        if client_id is not None:
            span.set_attribute(CLIENT_ID, client_id)
    if protected:
        span.set_attribute(DECISION, _decision(status, allowed=token is not None))
    code = error_code(observed)
    if code is not None:
        span.set_attribute(ERROR_TYPE, code)


def _decision(status: int | None, *, allowed: bool) -> str:
    if status == 429:
        return "rate_limited"
    if allowed:
        return "allowed"
    return {401: "unauthorized", 403: "forbidden"}.get(status or 0, "refused")


def _jsonrpc(observed: Observed) -> dict[str, Any]:
    """The method, tool and id of a single JSON-RPC message (a batch gets none)."""
    body = observed.body()
    if not body:
        return {}
    try:
        messages = parse_jsonrpc(body)
    except MalformedRequest:
        return {}
    if len(messages) != 1:
        return {}
    message = messages[0]
    found: dict[str, Any] = {}
    method = printable(message.get("method"), 128)
    if method is None:
        return found
    found[MCP_METHOD] = method
    request_id = message.get("id")
    if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
        recorded_id = printable(str(request_id), 128)
        if recorded_id is not None:
            found[JSONRPC_ID] = recorded_id
    params = message.get("params")
    name = printable(params.get("name"), 128) if isinstance(params, dict) else None
    if method == "tools/call":
        found[OPERATION] = "execute_tool"
        if name is not None:
            found[TOOL_NAME] = name
    return found
