"""A small fake authorization server and protected resource for the client helper's tests.

One Starlette app on one origin: protected resource metadata, RFC 8414 metadata, /authorize that
redirects straight back (no UI), /token (authorization_code, refresh_token, client_credentials),
/register, and /mcp that checks bearer tokens and scopes. Everything it saw is recorded.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

BASE = "http://127.0.0.1:8000"


@dataclass
class Issued:
    scopes: set[str]
    expires_at: float
    client_id: str


@dataclass
class FakeServers:
    """Knobs and records of the fake. ``now`` is the shared clock (also pass it to OAuth)."""

    base: str = BASE
    prm: bool = True
    scopes_supported: list[str] | None = None
    challenge_scope: str | None = None
    required_scopes: set[str] = field(default_factory=set)
    as_scopes: list[str] | None = None
    expires_in: int = 3600
    issue_refresh: bool = True
    registration: bool = True
    iss_in_redirect: bool = False
    auth_methods: list[str] = field(default_factory=lambda: ["none", "client_secret_basic"])
    now: float = 1_000_000.0
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    resource_requests: list[str | None] = field(default_factory=list)
    tokens: dict[str, Issued] = field(default_factory=dict)
    refresh_tokens: dict[str, Issued] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _counter: Iterator[int] = field(default_factory=itertools.count)

    def clock(self) -> float:
        return self.now

    @property
    def resource(self) -> str:
        return f"{self.base}/mcp"

    def metadata(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "issuer": self.base,
            "authorization_endpoint": f"{self.base}/authorize",
            "token_endpoint": f"{self.base}/token",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": self.auth_methods,
        }
        if self.registration:
            doc["registration_endpoint"] = f"{self.base}/register"
        if self.as_scopes is not None:
            doc["scopes_supported"] = self.as_scopes
        if self.iss_in_redirect:
            doc["authorization_response_iss_parameter_supported"] = True
        return doc

    def challenge(self, status: int, error: str, scope: str | None) -> Response:
        params = [f'error="{error}"']
        if scope:
            params.append(f'scope="{scope}"')
        params.append(f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"')
        headers = {"www-authenticate": "Bearer " + ", ".join(params)}
        return JSONResponse({"error": error}, status, headers=headers)

    def check_bearer(self, authorization: str | None) -> Response | None:
        """``None`` when the request may pass, else the 401/403 to send."""
        self.resource_requests.append(authorization)
        token = (authorization or "").removeprefix("Bearer ")
        issued = self.tokens.get(token)
        if issued is None or issued.expires_at <= self.now:
            return self.challenge(401, "invalid_token", self.challenge_scope)
        if not self.required_scopes <= issued.scopes:
            return self.challenge(403, "insufficient_scope", " ".join(sorted(self.required_scopes)))
        return None

    def issue(self, client_id: str, scope: str | None) -> dict[str, Any]:
        n = next(self._counter)
        scopes = set((scope or "").split())
        access = f"access-{n}"
        self.tokens[access] = Issued(scopes, self.now + self.expires_in, client_id)
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
        }
        if scope:
            body["scope"] = scope
        if self.issue_refresh:
            refresh = f"refresh-{n}"
            self.refresh_tokens[refresh] = Issued(scopes, self.now + 86400, client_id)
            body["refresh_token"] = refresh
        return body

    # -- endpoints --------------------------------------------------------------------------

    async def prm_endpoint(self, request: Request) -> Response:
        if not self.prm:
            return JSONResponse({"error": "not_found"}, 404)
        doc: dict[str, Any] = {"resource": self.resource, "authorization_servers": [self.base]}
        if self.scopes_supported is not None:
            doc["scopes_supported"] = self.scopes_supported
        return JSONResponse(doc)

    async def metadata_endpoint(self, request: Request) -> Response:
        return JSONResponse(self.metadata())

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.authorize_requests.append(query)
        code = f"code-{next(self._counter)}"
        self.codes[code] = query
        back = {"code": code, "state": query["state"]}
        if self.iss_in_redirect:
            back["iss"] = self.base
        return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)

    async def token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append(
            {**form, "authorization": request.headers.get("authorization", "")}
        )
        client_id = form.get("client_id") or _basic_user(request.headers.get("authorization"))
        grant = form.get("grant_type")
        if grant == "authorization_code":
            pending = self.codes.pop(form.get("code", ""), None)
            if pending is None or _s256(form.get("code_verifier", "")) != pending["code_challenge"]:
                return JSONResponse({"error": "invalid_grant"}, 400)
            return JSONResponse(self.issue(client_id, pending.get("scope")))
        if grant == "refresh_token":
            old = self.refresh_tokens.pop(form.get("refresh_token", ""), None)  # rotation
            if old is None:
                return JSONResponse({"error": "invalid_grant"}, 400)
            return JSONResponse(self.issue(old.client_id, " ".join(sorted(old.scopes)) or None))
        if grant in ("client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer"):
            return JSONResponse(self.issue(client_id, form.get("scope")))
        return JSONResponse({"error": "unsupported_grant_type"}, 400)

    async def register(self, request: Request) -> Response:
        body = await request.json()
        self.registrations.append(body)
        info = {**body, "client_id": f"client-{len(self.registrations)}"}
        return JSONResponse(info, 201)

    async def mcp(self, request: Request) -> Response:
        refusal = self.check_bearer(request.headers.get("authorization"))
        return refusal or JSONResponse({"ok": True})

    def app(self, mcp_app: ASGIApp | None = None) -> Starlette:
        routes = [
            Route("/.well-known/oauth-protected-resource/mcp", self.prm_endpoint),
            Route("/.well-known/oauth-protected-resource", self.prm_endpoint),
            Route("/.well-known/oauth-authorization-server", self.metadata_endpoint),
            Route("/authorize", self.authorize),
            Route("/token", self.token, methods=["POST"]),
            Route("/register", self.register, methods=["POST"]),
        ]
        if mcp_app is None:
            routes.append(Route("/mcp", self.mcp, methods=["GET", "POST"]))
        app = Starlette(routes=routes)
        if mcp_app is not None:
            return _Guarded(app, mcp_app, self)  # type: ignore[return-value]
        return app


class _Guarded:
    """Sends /mcp to ``mcp_app`` behind the bearer check, everything else to ``oauth``."""

    def __init__(self, oauth: ASGIApp, mcp_app: ASGIApp, fake: FakeServers) -> None:
        self.oauth, self.mcp_app, self.fake = oauth, mcp_app, fake

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the MCP app's session manager starts here
            await self.mcp_app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization")
            refusal = self.fake.check_bearer(auth.decode() if auth else None)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            await self.mcp_app(scope, receive, send)
            return
        await self.oauth(scope, receive, send)


def _basic_user(header: str | None) -> str:
    if not header or not header.startswith("Basic "):
        return ""
    return base64.b64decode(header[6:]).decode().split(":", 1)[0]


def _s256(verifier: str) -> str:
    return (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )


@contextlib.contextmanager
def serve(
    app: ASGIApp | None = None, *, factory: Callable[[str], ASGIApp] | None = None
) -> Iterator[str]:
    """Run ``app`` (or ``factory(base_url)``) with uvicorn on 127.0.0.1 on an ephemeral port;
    yield its base URL.

    The socket is bound and listening before the thread starts, so clients can connect at once
    (the kernel queues them); no polling for start-up.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    target = factory(base) if factory is not None else app
    config = uvicorn.Config(target, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
