"""``mcpauth proxy``, HTTP mode: a streaming reverse proxy in front of an upstream MCP server.

Wrapped by :class:`ProtectedResourceMiddleware`, it forwards authenticated requests with the
caller's identity in headers and never the caller's token (MCP RS-17). Bodies stream both
ways (SSE included) over pooled connections; an unreachable upstream gives 502 with a JSON-RPC
error body.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx

from mcpauth.middleware._asgi import Message, Receive, Scope, Send, jsonrpc_error, send_json
from mcpauth.middleware.identity import verified_token

__all__ = ["IdentityHeaders", "UpstreamProxy"]

logger = logging.getLogger("mcpauth.proxy")

# RFC 9110 §7.6.1 hop-by-hop fields, plus what the proxy sets itself.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)
_IDENTITY_PREFIX = b"x-mcpauth-"
UPSTREAM_UNAVAILABLE = -32603


@dataclass(frozen=True)
class IdentityHeaders:
    """Header names that carry the caller's identity upstream."""

    subject: str = "X-MCPAuth-Subject"
    client: str = "X-MCPAuth-Client"
    scopes: str = "X-MCPAuth-Scopes"

    def names(self) -> frozenset[bytes]:
        return frozenset(n.lower().encode() for n in (self.subject, self.client, self.scopes))


def default_client() -> httpx.AsyncClient:
    """Pooled connections; no read timeout so that SSE streams may stay open."""
    timeout = httpx.Timeout(connect=5.0, read=None, write=30.0, pool=10.0)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    return httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False)


class UpstreamProxy:
    """ASGI app forwarding requests for ``path`` to ``upstream`` (other paths get 404)."""

    def __init__(
        self,
        upstream: str,
        *,
        path: str,
        client: httpx.AsyncClient | None = None,
        identity_headers: IdentityHeaders | None = None,
    ) -> None:
        self.upstream = upstream
        self.path = path or "/"
        self.client = client or default_client()
        self.identity = identity_headers or IdentityHeaders()
        self._strip = _HOP_BY_HOP | self.identity.names() | {b"authorization"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path.rstrip("/"):
            await send_json(send, 404, {"error": "not_found"})
            return
        request = self.client.build_request(
            scope["method"],
            self._target(scope),
            headers=self._request_headers(scope),
            content=_body(receive) if _has_body(scope) else None,
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            logger.warning("upstream %s failed: %s", self.upstream, type(exc).__name__)
            await send_json(
                send, 502, jsonrpc_error(UPSTREAM_UNAVAILABLE, "Upstream MCP server unavailable")
            )
            return
        try:
            await _relay(response, receive, send)
        finally:
            await response.aclose()

    def _target(self, scope: Scope) -> str:
        query = scope.get("query_string", b"").decode("latin-1")
        return self.upstream + (f"?{query}" if query else "")

    def _request_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        headers = [
            (key, value)
            for key, value in scope["headers"]
            if key.lower() not in self._strip and not key.lower().startswith(_IDENTITY_PREFIX)
        ]
        headers.append((b"host", urlsplit(self.upstream).netloc.encode()))
        token = verified_token(scope)
        if token is not None:
            # MCP RS-17: identity goes upstream, the caller's token never does.
            headers.append((self.identity.subject.encode(), (token.subject or "").encode()))
            headers.append((self.identity.client.encode(), token.client_id.encode()))
            headers.append((self.identity.scopes.encode(), " ".join(token.scopes).encode()))
        return headers

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


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


async def _relay(response: httpx.Response, receive: Receive, send: Send) -> None:
    """Stream the upstream response to the client; stop when the client goes away."""
    headers = [
        (key.lower(), value)
        for key, value in response.headers.raw
        if key.lower() not in _HOP_BY_HOP
    ]
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
