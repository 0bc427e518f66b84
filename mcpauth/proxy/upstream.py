"""``mcpauth proxy``, HTTP mode: a streaming reverse proxy in front of an upstream MCP server.

Wrapped by :class:`ProtectedResourceMiddleware`, it forwards authenticated requests with the
caller's identity in headers and never the caller's token (MCP RS-17). Bodies stream both
ways (SSE included) over pooled connections; an unreachable upstream gives 502 with a JSON-RPC
error body.

The proxy creates its HTTP client on the first request it forwards and closes it at lifespan
shutdown or in :meth:`UpstreamProxy.aclose`; a ``client=`` you pass stays yours to close.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import anyio
import httpx2

from mcpauth.middleware._asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    first_header,
    jsonrpc_error,
    outside_http,
    send_json,
)
from mcpauth.middleware._http import AsyncClosing, LazyClient
from mcpauth.middleware.identity import verified_token
from mcpauth.oauth import format_scope
from mcpauth.tracing import tracer as traces

__all__ = ["CORSGrant", "IdentityHeaders", "UpstreamProxy"]

logger = logging.getLogger("mcpauth.proxy")

# RFC 9110 §7.6.1: hop-by-hop fields (plus those the Connection field names) are never
# forwarded, in either direction. Proxy-Authenticate/-Authorization are for this hop too.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Set by the proxy from what it saw; a client's own values are dropped (RFC 7239 §8.1).
_FORWARDING = frozenset(
    {b"host", b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"}
)
# The caller's token and its DPoP proof (RFC 9449) are for this hop only (MCP RS-17).
_CREDENTIALS = frozenset({b"authorization", b"dpop"})
# The ASGI server adds its own; the upstream's would be duplicates.
_SERVER_SET = frozenset({b"date", b"server"})
_IDENTITY_PREFIX = b"x-mcpauth-"
UPSTREAM_UNAVAILABLE = -32603
SendUpstream = Callable[[httpx2.AsyncClient, httpx2.Request], Awaitable[httpx2.Response]]
_PREFLIGHT_METHODS = b"GET, POST, DELETE, OPTIONS"
_PREFLIGHT_HEADERS = (
    b"Authorization, DPoP, Content-Type, Accept, Last-Event-ID, Mcp-Session-Id, "
    b"Mcp-Protocol-Version"
)
_EXPOSED_HEADERS = (
    b"Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, DPoP-Nonce, Retry-After"
)


def field_name(raw: bytes) -> bytes:
    """A header name as compared here: lowercase, ``_`` read as ``-`` (some servers map one to
    the other, so ``X_MCPAuth_Subject`` must count as ``X-MCPAuth-Subject``)."""
    return raw.lower().replace(b"_", b"-")


def connection_named(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The field names listed in ``Connection`` (RFC 9110 §7.6.1), normalized."""
    named: set[bytes] = set()
    for key, value in headers:
        if field_name(key) == b"connection":
            named.update(field_name(token.strip()) for token in value.split(b",") if token.strip())
    return frozenset(named)


@dataclass(frozen=True)
class IdentityHeaders:
    """Header names that carry the caller's identity upstream."""

    subject: str = "X-MCPAuth-Subject"
    client: str = "X-MCPAuth-Client"
    scopes: str = "X-MCPAuth-Scopes"
    issuer: str = "X-MCPAuth-Issuer"

    def names(self) -> frozenset[bytes]:
        """The names, normalized as :func:`field_name` does."""
        return frozenset(
            field_name(n.encode()) for n in (self.subject, self.client, self.scopes, self.issuer)
        )


def default_client() -> httpx2.AsyncClient:
    """Pooled connections; no read timeout so that SSE streams may stay open."""
    timeout = httpx2.Timeout(connect=5.0, read=None, write=30.0, pool=10.0)
    limits = httpx2.Limits(max_connections=200, max_keepalive_connections=50)
    return httpx2.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False)


class UpstreamProxy(AsyncClosing):
    """ASGI app forwarding requests for ``path`` to ``upstream`` (other paths get 404).

    Header hygiene, both ways: hop-by-hop fields and those named in ``Connection`` are dropped
    (RFC 9110 §7.6.1); from the client, every spelling (case, ``_`` for ``-``) of the identity
    headers, any ``X-MCPAuth-*``, ``Authorization``, ``DPoP`` (the token's proof, RFC 9449) and
    the forwarding headers are dropped, and ``X-Forwarded-For``/``-Proto``/``-Host`` are set
    from what the proxy saw; the identity headers (subject, client, scopes, issuer) come from
    the verified token. From the upstream, ``Date``/``Server`` (the ASGI server sets its own)
    and CORS headers are dropped. CORS is answered here: a preflight never reaches the
    upstream (it allows the ``DPoP`` header, and ``DPoP-Nonce`` is exposed to scripts);
    ``allowed_origins`` (``None``: any origin) decides which origins get
    ``Access-Control-Allow-Origin``.

    With traces on (:mod:`mcpauth.tracing`) each upstream request is a CLIENT span, and its
    W3C ``traceparent`` replaces the caller's; off, the caller's passes unchanged.

    Raises:
        ConfigurationError: the environment asks for traces the OpenTelemetry SDK cannot
            give.
    """

    def __init__(
        self,
        upstream: str,
        *,
        path: str,
        client: httpx2.AsyncClient | None = None,
        identity_headers: IdentityHeaders | None = None,
        allowed_origins: Iterable[str] | None = None,
    ) -> None:
        self.upstream = upstream
        self.path = path or "/"
        self._client = LazyClient(client, factory=default_client)
        self.identity = identity_headers or IdentityHeaders()
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self._strip = _HOP_BY_HOP | _FORWARDING | self.identity.names() | _CREDENTIALS
        self._send_upstream: SendUpstream = _send
        tracer = traces("mcpauth.proxy")
        if tracer is not None:  # imported only then: nothing of OpenTelemetry when off
            from mcpauth.tracing.asgi import send_traced

            self._send_upstream = partial(send_traced, tracer)

    @property
    def client(self) -> httpx2.AsyncClient:
        """The client requests go upstream with: ``client=``, or one created on first use."""
        return self._client.get()

    async def aclose(self) -> None:
        """Close the client created here, if any (a given ``client=`` is left to its owner);
        lifespan shutdown does this too."""
        await self._client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await outside_http(scope, receive, send, self._lifespan):
            return
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path.rstrip("/"):
            await send_json(send, 404, {"error": "not_found"})
            return
        if _is_preflight(scope):
            await self._preflight(scope, send)
            return
        client = self._client.get()
        request = client.build_request(
            scope["method"],
            self._target(scope),
            headers=self._request_headers(scope),
            content=_body(receive) if _has_body(scope) else None,
        )
        try:
            response = await self._send_upstream(client, request)
        except httpx2.HTTPError as exc:
            logger.warning("upstream %s failed: %s", self.upstream, type(exc).__name__)
            await send_json(
                send, 502, jsonrpc_error(UPSTREAM_UNAVAILABLE, "Upstream MCP server unavailable")
            )
            return
        try:
            await _relay(response, receive, send, self.cors_headers(scope))
        finally:
            await response.aclose()

    def _target(self, scope: Scope) -> str:
        query = scope.get("query_string", b"").decode("latin-1")
        return self.upstream + (f"?{query}" if query else "")

    def _request_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        received: list[tuple[bytes, bytes]] = list(scope["headers"])
        strip = self._strip | connection_named(received)
        headers = [
            (key, value)
            for key, value in received
            if field_name(key) not in strip and not field_name(key).startswith(_IDENTITY_PREFIX)
        ]
        headers.append((b"host", urlsplit(self.upstream).netloc.encode()))
        headers.extend(_forwarded_for(scope))
        token = verified_token(scope)
        if token is not None:
            # MCP RS-17: identity goes upstream, the caller's token never does.
            headers.append((self.identity.subject.encode(), (token.subject or "").encode()))
            headers.append((self.identity.client.encode(), token.client_id.encode()))
            headers.append((self.identity.scopes.encode(), format_scope(token.scopes).encode()))
            headers.append((self.identity.issuer.encode(), (token.issuer or "").encode()))
        return headers

    def cors_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        """``Access-Control-Allow-Origin`` (and friends) for this request's Origin, if allowed."""
        origin = first_header(scope, b"origin")
        if origin is None:
            return []
        if self.allowed_origins is None:
            allow = [(b"access-control-allow-origin", b"*")]
        elif origin in self.allowed_origins:
            allow = [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"vary", b"Origin"),
            ]
        else:
            return []
        return [*allow, (b"access-control-expose-headers", _EXPOSED_HEADERS)]

    async def _preflight(self, scope: Scope, send: Send) -> None:
        """Answer a CORS preflight here; it carries no credentials and never goes upstream."""
        allow = self.cors_headers(scope)
        if allow:
            allow += [
                (b"access-control-allow-methods", _PREFLIGHT_METHODS),
                (b"access-control-allow-headers", _PREFLIGHT_HEADERS),
                (b"access-control-max-age", b"600"),
            ]
        status = 204 if allow else 403
        await send({"type": "http.response.start", "status": status, "headers": allow})
        await send({"type": "http.response.body", "body": b""})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


class CORSGrant:
    """``app`` (the middleware in front of ``proxy``) with the proxy's CORS grant added to the
    responses it makes itself (its 401 and 403 refusals), so that a browser client may read
    their ``WWW-Authenticate`` and ``DPoP-Nonce``; a response that carries a grant already (the
    proxy's own, the metadata's) is left alone, and an Origin the proxy does not allow gets
    none."""

    def __init__(self, app: ASGIApp, proxy: UpstreamProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        grant = self.proxy.cors_headers(scope) if scope["type"] == "http" else []
        if not grant:
            await self.app(scope, receive, send)
            return

        async def granted(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if all(bytes(k).lower() != b"access-control-allow-origin" for k, _ in headers):
                    message = {**message, "headers": [*headers, *grant]}
            await send(message)

        await self.app(scope, receive, granted)


async def _send(client: httpx2.AsyncClient, request: httpx2.Request) -> httpx2.Response:
    return await client.send(request, stream=True)


def _is_preflight(scope: Scope) -> bool:
    return (
        scope.get("method") == "OPTIONS"
        and first_header(scope, b"access-control-request-method") is not None
    )


def _forwarded_for(scope: Scope) -> list[tuple[bytes, bytes]]:
    """``X-Forwarded-*`` from the connection the proxy accepted, never from the client's claims."""
    headers: list[tuple[bytes, bytes]] = []
    client = scope.get("client")
    if client:
        headers.append((b"x-forwarded-for", str(client[0]).encode("latin-1")))
    headers.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode("latin-1")))
    host = first_header(scope, b"host")
    if host is not None:
        headers.append((b"x-forwarded-host", host.encode("latin-1")))
    return headers


def _has_body(scope: Scope) -> bool:
    return scope["method"] not in ("GET", "HEAD", "DELETE", "OPTIONS")


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _relay(
    response: httpx2.Response, receive: Receive, send: Send, cors: list[tuple[bytes, bytes]]
) -> None:
    """Stream the upstream response to the client; stop when the client goes away."""
    raw = [(key.lower(), value) for key, value in response.headers.raw]
    strip = _HOP_BY_HOP | _SERVER_SET | connection_named(raw)
    headers = [
        (key, value)
        for key, value in raw
        if field_name(key) not in strip and not key.startswith(b"access-control-")
    ]
    headers.extend(cors)
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    async with anyio.create_task_group() as group:

        async def watch_disconnect() -> None:
            message: Message = {"type": ""}
            while message["type"] != "http.disconnect":
                message = await receive()
            group.cancel_scope.cancel()

        group.start_soon(watch_disconnect)
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        group.cancel_scope.cancel()
