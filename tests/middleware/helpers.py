"""Helpers for the middleware tests: a tiny authorization server (metadata, JWKS,
introspection) served in-process, a token minter, and a recording app."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.middleware import verified_token

ISSUER = "https://as.example.com"
RESOURCE = "https://mcp.example.com/mcp"
OTHER_RESOURCE = "https://other.example.com/mcp"
INTROSPECTION_CLIENT = ("rs-client", "rs-secret")


@dataclass
class FakeAuthorizationServer:
    """Signs tokens and serves metadata, JWKS and introspection like a real AS would."""

    issuer: str = ISSUER
    alg: jwt.Algorithm = "ES256"
    kid: str = "key-1"
    jwks_cache_control: str = "max-age=300"
    metadata_path: str = "oauth-authorization-server"
    metadata_issuer: str | None = None
    fetches: dict[str, int] = field(default_factory=dict)
    active: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra_keys: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key = jwt.generate_private_key(self.alg)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": "alice",
            "aud": RESOURCE,
            "client_id": "client-1",
            "scope": "mcp:basic",
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_urlsafe(16),
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def mint(self, *, kid: str | None = None, typ: str = "at+jwt", **overrides: Any) -> str:
        return jwt.encode(
            self.claims(**overrides), self.key, alg=self.alg, kid=kid or self.kid, typ=typ
        )

    def jwks(self) -> dict[str, Any]:
        public = jwt.public_jwk(self.key.public_key(), kid=self.kid, alg=self.alg)
        return {"keys": [public, *self.extra_keys]}

    def rotate(self) -> None:
        """Publish a new key under a new kid (the old one is dropped)."""
        self.key = jwt.generate_private_key(self.alg)
        self.kid = f"key-{secrets.token_hex(4)}"

    def _count(self, name: str) -> None:
        self.fetches[name] = self.fetches.get(name, 0) + 1

    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            self._count("metadata")
            if not request.url.path.startswith(f"/.well-known/{self.metadata_path}"):
                return Response(status_code=404)
            return JSONResponse(
                {
                    "issuer": self.metadata_issuer or self.issuer,
                    "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token",
                    "jwks_uri": f"{self.issuer}/jwks",
                    "introspection_endpoint": f"{self.issuer}/introspect",
                    "code_challenge_methods_supported": ["S256"],
                }
            )

        async def jwks(request: Request) -> Response:
            self._count("jwks")
            return JSONResponse(self.jwks(), headers={"Cache-Control": self.jwks_cache_control})

        async def introspect(request: Request) -> Response:
            self._count("introspect")
            expected = httpx2.BasicAuth(*INTROSPECTION_CLIENT)._auth_header
            if request.headers.get("authorization") != expected:
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            form = await request.form()
            data = self.active.get(str(form.get("token")), {"active": False})
            return JSONResponse(data)

        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", metadata),
                Route("/.well-known/openid-configuration", metadata),
                Route("/jwks", jwks),
                Route("/introspect", introspect, methods=["POST"]),
            ]
        )

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.ASGITransport(self.app()))


@dataclass
class RecordingApp:
    """An ASGI app that records what reached it and answers with what it saw."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    session_id: str | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        user = scope.get("user")
        seen = {
            "path": scope["path"],
            "body": body.decode(),
            "user": getattr(user, "display_name", None),
            "subject": getattr(verified_token(scope), "subject", None),
            "scopes": list(getattr(scope.get("auth"), "scopes", [])),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
        }
        self.calls.append(seen)
        headers = [(b"content-type", b"application/json")]
        if self.session_id is not None:
            headers.append((b"mcp-session-id", self.session_id.encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


def client_for(app: Any, base_url: str = "https://mcp.example.com") -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=base_url)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def rpc(method: str, params: dict[str, Any] | None = None, id: int = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


@contextlib.contextmanager
def serve(app: Any = None, *, factory: Any = None, lifespan: str = "auto") -> Iterator[str]:
    """Run ``app`` (or ``factory("http://host:port")``) with uvicorn in a thread on 127.0.0.1
    (ephemeral port); yield its ``host:port``.

    The socket listens before the thread starts, so clients connect at once (no start-up poll);
    the lifespan startup may still be running then, which these apps do not mind. Forwarding
    headers are not trusted, so a test client on 127.0.0.1 is seen as a direct client.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    target = factory(f"http://{address}") if factory is not None else app
    config = uvicorn.Config(target, log_level="warning", lifespan=lifespan, proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield address
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
