"""RFC 9728 protected resource metadata: the document and its well-known routes."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mcpauth.metadata import ProtectedResourceMetadata
from mcpauth.middleware._asgi import Receive, Scope, Send
from mcpauth.uris import well_known_path, well_known_url

__all__ = ["ResourceMetadataEndpoint", "metadata_paths", "metadata_url", "resource_metadata"]

WELL_KNOWN_SUFFIX = "oauth-protected-resource"
_CORS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"GET, HEAD, OPTIONS"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-max-age", b"86400"),
]


def resource_metadata(
    *,
    resource: str,
    authorization_servers: Sequence[str],
    scopes_supported: Sequence[str] | None = None,
    resource_name: str | None = None,
    resource_documentation: str | None = None,
) -> ProtectedResourceMetadata:
    """The document for ``resource`` (already canonical).

    ``offline_access`` is left out of ``scopes_supported`` (MCP RS-07).

    Raises:
        ValueError: ``authorization_servers`` is empty (RFC 9728 via MCP RS-01 needs one).
    """
    if not authorization_servers:
        raise ValueError("at least one authorization server is required (MCP RS-01)")
    scopes = None
    if scopes_supported is not None:
        scopes = [s for s in dict.fromkeys(scopes_supported) if s != "offline_access"]
    return ProtectedResourceMetadata(
        resource=resource,
        authorization_servers=list(authorization_servers),
        scopes_supported=scopes,
        bearer_methods_supported=["header"],
        resource_name=resource_name,
        resource_documentation=resource_documentation,
    )


def metadata_url(resource: str) -> str:
    """The path-aware metadata URL (RFC 9728 §3.1) that goes into ``resource_metadata=``."""
    return well_known_url(resource, WELL_KNOWN_SUFFIX)


def metadata_paths(resource: str) -> frozenset[str]:
    """Paths the document is served at: path-aware and root (MCP RS-02: both)."""
    return frozenset(
        {well_known_path(resource, WELL_KNOWN_SUFFIX), f"/.well-known/{WELL_KNOWN_SUFFIX}"}
    )


class ResourceMetadataEndpoint:
    """ASGI endpoint serving one document with CORS for browser-based clients."""

    def __init__(self, document: ProtectedResourceMetadata) -> None:
        self.body = json.dumps(document.to_json(), separators=(",", ":")).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET")
        if method == "OPTIONS":
            await self._send(send, 204, b"", [])
        elif method in ("GET", "HEAD"):
            headers = [
                (b"content-type", b"application/json"),
                (b"cache-control", b"public, max-age=3600"),
            ]
            await self._send(send, 200, b"" if method == "HEAD" else self.body, headers)
        else:
            await self._send(send, 405, b"", [(b"allow", b"GET, HEAD, OPTIONS")])

    async def _send(
        self, send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        length = len(self.body) if status == 200 else len(body)
        headers = [*headers, *_CORS, (b"content-length", str(length).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
