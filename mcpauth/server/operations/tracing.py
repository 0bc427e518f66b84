"""Traces of the authorization server, when :mod:`mcpauth.tracing` turns them on: a SERVER
span per request, the child of the caller's ``traceparent``, named ``METHOD route`` with
the route's template (``POST /token``, ``GET /interaction/{interaction_id}``: never the path
itself, whose ids are not for traces), the status, the OAuth ``grant_type``, ``client_id``,
``scope`` and ``resource`` of the request (from its form or query, the client id also from
``Authorization: Basic``, never the secret beside it) and, on failure, the OAuth error code
in ``error.type``. No other field, header, cookie or query parameter is read into it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.trace import Span, StatusCode, Tracer
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpauth.errors import InvalidRequest
from mcpauth.oauth import parse_basic_authorization
from mcpauth.server.http_io import bare_media_type, parse_form
from mcpauth.tracing.asgi import (
    ERROR_TYPE,
    HTTP_METHOD,
    HTTP_ROUTE,
    HTTP_STATUS,
    Observed,
    error_code,
    printable,
    request_attributes,
    server_span,
    url_without_query,
)

__all__ = ["TracingMiddleware"]

GRANT_TYPE = "mcpauth.oauth.grant_type"
CLIENT_ID = "mcpauth.oauth.client_id"
SCOPE = "mcpauth.oauth.scope"
RESOURCE = "mcpauth.oauth.resource"
_FIELDS = {"grant_type": GRANT_TYPE, "client_id": CLIENT_ID, "scope": SCOPE, "resource": RESOURCE}
_FORM = "application/x-www-form-urlencoded"
_FORM_LIMIT = 64 * 1024  # a form larger than this is refused by the endpoints anyway


class TracingMiddleware:
    """Outermost but for the proxy headers: a span per HTTP request (module docstring).
    ``routes`` name the route of a request refused before the router saw it (the rate
    limiter's 429)."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.tracer = tracer
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_form = scope.get("method") == "POST" and _content_type(scope) == _FORM
        observed = Observed(receive, send, keep_request=_FORM_LIMIT if is_form else 0)
        attributes = request_attributes(scope)
        with server_span(self.tracer, scope, attributes[HTTP_METHOD], attributes) as span:
            try:
                await self.app(scope, observed.receive, observed.send)
            finally:
                _annotate(span, scope, observed, self._route(scope))

    def _route(self, scope: Scope) -> str | None:
        """The template of the route that took the request, or would have."""
        route = scope.get("route")
        if route is None:
            route = next((r for r in self.routes if r.matches(scope)[0] is Match.FULL), None)
        path = getattr(route, "path", None)
        return path if isinstance(path, str) else None


def _annotate(span: Span, scope: Scope, observed: Observed, route: str | None) -> None:
    if route is not None:
        span.set_attribute(HTTP_ROUTE, route)
        span.update_name(f"{scope.get('method')} {route}")
    if observed.status is not None:
        span.set_attribute(HTTP_STATUS, observed.status)
        if observed.status >= 500:
            span.set_status(StatusCode.ERROR)
    for name, value in _oauth_fields(scope, observed).items():
        span.set_attribute(name, value)
    code = error_code(observed)
    if code is not None:
        span.set_attribute(ERROR_TYPE, code)


def _oauth_fields(scope: Scope, observed: Observed) -> dict[str, Any]:
    """The four recorded fields, from the form body, else the query string; the client id
    also from Basic credentials."""
    body = observed.body()
    given = _parsed(body if body is not None else scope.get("query_string", b""))
    if "client_id" not in given:
        basic = parse_basic_authorization(_header(scope, b"authorization"))
        if basic is not None:
            given["client_id"] = basic[0]  # the id only: the secret never leaves here
    fields: dict[str, Any] = {}
    for name, attribute in _FIELDS.items():
        value = given.get(name)
        if value is None:
            continue
        if name == "resource" or (name == "client_id" and "://" in value):
            recorded = url_without_query(value)
        else:
            recorded = printable(value, 512)
        if recorded is not None:
            fields[attribute] = recorded
    return fields


def _parsed(form: bytes) -> dict[str, str]:
    try:
        return parse_form(form)
    except InvalidRequest:  # a repeated field, not UTF-8: the endpoint refuses it
        return {}


def _content_type(scope: Scope) -> str:
    return bare_media_type(_header(scope, b"content-type") or "")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
