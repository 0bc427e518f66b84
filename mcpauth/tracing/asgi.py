"""What the parts' spans are made of (imported only when tracing is on): the W3C trace context
of an incoming ASGI request and of an outgoing request, an ASGI exchange observed as it
passes, the error code of a refusal, and values made safe to record.

What is never recorded: header values (``Authorization``, ``DPoP``, ``Cookie`` and the rest),
bodies (a part picks named, non-secret fields from them: :func:`form_fields`, the JSON-RPC
method and tool name), query strings, exception messages. Recorded text is printable ASCII,
bounded in length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import httpx2
from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from mcpauth.asgi import Message, Receive, Scope, Send

__all__ = [
    "Observed",
    "error_code",
    "form_fields",
    "incoming_context",
    "printable",
    "request_attributes",
    "send_traced",
    "server_span",
    "url_without_query",
]


# Attribute names: OpenTelemetry semantic conventions (HTTP, error, MCP, GenAI), and mcpauth's
# own under ``mcpauth.`` (docs/deploy.md, "Traces").
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"
URL_SCHEME = "url.scheme"
URL_FULL = "url.full"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_ERROR_BODY_LIMIT = 4096


def printable(value: object, limit: int = 256) -> str | None:
    """``value`` as printable ASCII of at most ``limit`` characters, or ``None`` when it is not
    a non-empty string."""
    if not isinstance(value, str) or not value:
        return None
    return _UNPRINTABLE.sub("?", value[:limit])


def url_without_query(url: str) -> str | None:
    """``url`` without its user information, query and fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return None
    if ":" in host:
        host = f"[{host}]"
    netloc = host + port
    return printable(urlunsplit((parts.scheme, netloc, parts.path, "", "")), 512)


class _HeaderGetter(Getter[Scope]):
    """Reads propagation fields from an ASGI scope's headers."""

    def get(self, carrier: Scope, key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [
            bytes(value).decode("latin-1")
            for field, value in carrier.get("headers", ())
            if bytes(field).lower() == name
        ]
        return values or None

    def keys(self, carrier: Scope) -> list[str]:
        return [bytes(field).decode("latin-1") for field, _ in carrier.get("headers", ())]


_GETTER = _HeaderGetter()


def incoming_context(scope: Scope) -> Context:
    """The trace context the request carries (W3C ``traceparent``, or whatever propagators
    ``OTEL_PROPAGATORS`` names)."""
    return propagate.extract(scope, getter=_GETTER)


@contextmanager
def server_span(
    tracer: Tracer, scope: Scope, name: str, attributes: Mapping[str, Any]
) -> Iterator[Span]:
    """A SERVER span for an incoming request, the child of the caller's trace context and the
    current span while the block runs. An exception leaves its class name in ``error.type``,
    never its message."""
    with tracer.start_as_current_span(
        name,
        context=incoming_context(scope),
        kind=SpanKind.SERVER,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise


def request_attributes(scope: Scope) -> dict[str, Any]:
    """The method and scheme of an ASGI request (never its query string or headers)."""
    return {
        HTTP_METHOD: printable(scope.get("method"), 16) or "_OTHER",
        URL_SCHEME: printable(scope.get("scheme"), 8) or "http",
    }


class Observed:
    """An ASGI exchange watched as it passes, unchanged: the response status and headers, the
    request body as far as whoever reads it reads it (when ``keep_request`` is a positive
    number of bytes), and the start of an error response's body."""

    def __init__(self, receive: Receive, send: Send, *, keep_request: int = 0) -> None:
        self._receive = receive
        self._send = send
        self._keep = keep_request
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.request_body = bytearray()
        self.request_complete = False
        self.error_body = bytearray()

    async def receive(self) -> Message:
        message = await self._receive()
        if self._keep and message["type"] == "http.request":
            chunk = message.get("body", b"")
            if len(self.request_body) + len(chunk) > self._keep:
                self._keep = 0  # too large to look at: nothing is taken from it
                self.request_body.clear()
            else:
                self.request_body += chunk
                self.request_complete = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", ())]
        elif (
            message["type"] == "http.response.body"
            and self.status is not None
            and self.status >= 400
            and len(self.error_body) < _ERROR_BODY_LIMIT
        ):
            self.error_body += message.get("body", b"")[:_ERROR_BODY_LIMIT]
        await self._send(message)

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None

    def body(self) -> bytes | None:
        """The whole request body, if it was read to its end and kept."""
        return bytes(self.request_body) if self._keep and self.request_complete else None


def error_code(observed: Observed) -> str | None:
    """The error code of a response: the ``error`` of an OAuth error body (RFC 6749 §5.2,
    RFC 6750 §3.1) or the ``code`` of a JSON-RPC error, else the ``error`` parameter of a
    redirect (RFC 6749 §4.1.2.1), else the status of a 5xx."""
    status = observed.status or 0
    if status >= 400 and observed.error_body:
        code = _body_error(bytes(observed.error_body))
        if code is not None:
            return code
    if 300 <= status < 400:
        location = observed.header(b"location")
        if location:
            for name, value in parse_qsl(urlsplit(location).query):
                if name == "error":
                    return value if _ERROR_CODE.match(value) else None
    return str(status) if status >= 500 else None


def _body_error(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):  # JSON-RPC 2.0 §5.1
        error = error.get("code")
        error = str(error) if isinstance(error, int) and not isinstance(error, bool) else None
    return error if isinstance(error, str) and _ERROR_CODE.match(error) else None


def form_fields(pairs: Iterable[tuple[str, str]], names: Iterable[str]) -> dict[str, str]:
    """The fields ``names`` of a parsed form or query, each only when given once."""
    wanted = set(names)
    seen: dict[str, str | None] = {}
    for name, value in pairs:
        if name in wanted:
            seen[name] = None if name in seen else value
    return {name: value for name, value in seen.items() if value}


async def send_traced(
    tracer: Tracer, client: httpx2.AsyncClient, request: httpx2.Request
) -> httpx2.Response:
    """``client.send(request, stream=True)`` in a CLIENT span whose trace context goes in the
    request's headers, replacing any the request carried.

    Raises:
        httpx2.HTTPError: as ``client.send`` does.
    """
    url = request.url
    attributes: dict[str, Any] = {
        HTTP_METHOD: printable(request.method, 16) or "_OTHER",
        SERVER_ADDRESS: printable(url.host) or "",
    }
    full = url_without_query(str(url))
    if full is not None:
        attributes[URL_FULL] = full
    if url.port is not None:
        attributes[SERVER_PORT] = url.port
    with tracer.start_as_current_span(
        attributes[HTTP_METHOD],
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        for field in propagate.get_global_textmap().fields:
            request.headers.pop(field, None)
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        request.headers.update(carrier)
        try:
            response = await client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
        span.set_attribute(HTTP_STATUS, response.status_code)
        if response.status_code >= 400:
            span.set_attribute(ERROR_TYPE, str(response.status_code))
            span.set_status(StatusCode.ERROR)
        return response
