"""A small fake authorization server and protected resource for the client helper's tests.

One Starlette app on one origin: protected resource metadata, RFC 8414 metadata, /authorize that
redirects straight back (no UI), /token (authorization_code, refresh_token, client_credentials),
/register, and /mcp that checks bearer tokens and scopes. Everything it saw is recorded.

DPoP (RFC 9449) when asked for: ``dpop_algs`` puts ``dpop_signing_alg_values_supported`` in
the metadata (unless ``dpop_in_metadata`` is false), the token endpoint checks any proof with
:func:`mcpauth.dpop.check_proof` and binds what it issues to the proof's key (refresh tokens
too), ``as_nonce`` and ``rs_nonce`` make the token endpoint and /mcp demand a nonce,
``rs_dpop_algs`` adds a ``DPoP`` challenge to /mcp's refusals; /mcp takes a bound token only as
``DPoP`` with a proof of its key.
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

from mcpauth.dpop import DPoPProof, check_proof
from mcpauth.errors import InvalidDPoPProof, UseDPoPNonce

BASE = "http://127.0.0.1:8000"


@dataclass
class Issued:
    scopes: set[str]
    expires_at: float
    client_id: str
    jkt: str | None = None  # the DPoP key it is bound to


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
    dpop_algs: list[str] | None = None
    dpop_in_metadata: bool = True  # False: DPoP works but the metadata does not say so
    as_nonce: str | None = None
    rs_nonce: str | None = None
    rs_dpop_algs: str | None = None
    token_proofs: list[DPoPProof | None] = field(default_factory=list)
    resource_proofs: list[DPoPProof] = field(default_factory=list)
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
        if self.dpop_algs is not None and self.dpop_in_metadata:
            doc["dpop_signing_alg_values_supported"] = self.dpop_algs
        return doc

    def challenge(
        self, status: int, error: str, scope: str | None, *, dpop: bool = False
    ) -> Response:
        """A refusal with a Bearer challenge, and a DPoP one when ``rs_dpop_algs`` is set or
        ``dpop`` (the request used DPoP: the error then goes in the DPoP challenge only)."""
        err = [f'error="{error}"']
        params = [f'scope="{scope}"'] if scope else []
        params.append(f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"')
        response = JSONResponse({"error": error}, status)
        bearer = params if dpop else err + params
        response.headers.append("www-authenticate", "Bearer " + ", ".join(bearer))
        if self.rs_dpop_algs is not None or dpop:
            algs = [f'algs="{self.rs_dpop_algs or "ES256"}"']
            value = "DPoP " + ", ".join(algs + (err if dpop else []) + params)
            response.headers.append("www-authenticate", value)
        return response

    def check_bearer(
        self, authorization: str | None, dpop: list[str] | None = None
    ) -> Response | None:
        """``None`` when the request may pass, else the 401/403 to send."""
        self.resource_requests.append(authorization)
        scheme, _, token = (authorization or "").partition(" ")
        issued = self.tokens.get(token)
        if issued is None or issued.expires_at <= self.now:
            return self.challenge(401, "invalid_token", self.challenge_scope)
        if (scheme.lower() == "dpop") != (issued.jkt is not None) or scheme.lower() not in (
            "bearer",
            "dpop",
        ):
            return self.challenge(401, "invalid_token", None, dpop=True)
        if issued.jkt is not None:
            try:
                proof = check_proof(
                    dpop or [],
                    method="POST",
                    url=self.resource,
                    access_token=token,
                    jkt=issued.jkt,
                    nonce=self.rs_nonce,
                )
            except UseDPoPNonce:
                refusal = self.challenge(401, "use_dpop_nonce", None, dpop=True)
                refusal.headers["dpop-nonce"] = self.rs_nonce or ""
                return refusal
            except InvalidDPoPProof:
                return self.challenge(401, "invalid_dpop_proof", None, dpop=True)
            self.resource_proofs.append(proof)
        if not self.required_scopes <= issued.scopes:
            scope = " ".join(sorted(self.required_scopes))
            return self.challenge(403, "insufficient_scope", scope, dpop=issued.jkt is not None)
        return None

    def issue(self, client_id: str, scope: str | None, jkt: str | None = None) -> dict[str, Any]:
        n = next(self._counter)
        scopes = set((scope or "").split())
        access = f"access-{n}"
        self.tokens[access] = Issued(scopes, self.now + self.expires_in, client_id, jkt)
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer" if jkt is None else "DPoP",
            "expires_in": self.expires_in,
        }
        if scope:
            body["scope"] = scope
        if self.issue_refresh:
            refresh = f"refresh-{n}"
            self.refresh_tokens[refresh] = Issued(scopes, self.now + 86400, client_id, jkt)
            body["refresh_token"] = refresh
        return body

    def token_proof(self, request: Request) -> DPoPProof | Response | None:
        """The token request's checked DPoP proof, ``None`` without one, or the refusal."""
        values = request.headers.getlist("dpop")
        if self.dpop_algs is None or not values:
            self.token_proofs.append(None)
            return None
        try:
            proof = check_proof(
                values,
                method="POST",
                url=f"{self.base}/token",
                nonce=self.as_nonce,
                algorithms=self.dpop_algs,
            )
        except UseDPoPNonce:
            self.token_proofs.append(None)
            headers = {"dpop-nonce": self.as_nonce or ""}
            return JSONResponse({"error": "use_dpop_nonce"}, 400, headers=headers)
        except InvalidDPoPProof:
            self.token_proofs.append(None)
            return JSONResponse({"error": "invalid_dpop_proof"}, 400)
        self.token_proofs.append(proof)
        return proof

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
        proof = self.token_proof(request)
        if isinstance(proof, Response):
            return proof
        jkt = proof.jkt if proof is not None else None
        if grant == "authorization_code":
            pending = self.codes.pop(form.get("code", ""), None)
            if pending is None or _s256(form.get("code_verifier", "")) != pending["code_challenge"]:
                return JSONResponse({"error": "invalid_grant"}, 400)
            return JSONResponse(self.issue(client_id, pending.get("scope"), jkt))
        if grant == "refresh_token":
            old = self.refresh_tokens.get(form.get("refresh_token", ""))
            if old is None:
                return JSONResponse({"error": "invalid_grant"}, 400)
            if old.jkt is not None and old.jkt != jkt:  # RFC 9449 §5: bound to the key
                return JSONResponse({"error": "invalid_dpop_proof"}, 400)
            del self.refresh_tokens[form.get("refresh_token", "")]  # rotation
            scope = " ".join(sorted(old.scopes)) or None
            return JSONResponse(self.issue(old.client_id, scope, jkt))
        if grant in ("client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer"):
            return JSONResponse(self.issue(client_id, form.get("scope"), jkt))
        return JSONResponse({"error": "unsupported_grant_type"}, 400)

    async def register(self, request: Request) -> Response:
        body = await request.json()
        self.registrations.append(body)
        info = {**body, "client_id": f"client-{len(self.registrations)}"}
        return JSONResponse(info, 201)

    async def mcp(self, request: Request) -> Response:
        refusal = self.check_bearer(
            request.headers.get("authorization"), request.headers.getlist("dpop")
        )
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
            proofs = [v.decode() for k, v in scope["headers"] if k == b"dpop"]
            refusal = self.fake.check_bearer(auth.decode() if auth else None, proofs)
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
