"""An upstream OpenID provider standing in for the network in the in-process tests (served
through an ``httpx2.MockTransport``): its OpenID configuration, its JWKS and its token endpoint,
which checks what mcpauth sends (client authentication, the code, the redirect URI, the PKCE
verifier) and answers with an ID token it signs. The person's sign-in at its authorization
endpoint is what :meth:`FakeProvider.approve` does. Tests change ``metadata``, ``keys`` or
``token_response`` to make it misbehave."""

from __future__ import annotations

import base64
import hashlib
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from joserfc import jwt
from joserfc.jwk import RSAKey

ALICE = {
    "sub": "alice-0001",
    "email": "alice@example.com",
    "email_verified": True,
    "name": "Alice Example",
}


# A 2048-bit RSA key takes ~50 ms to make, and the tests make a provider or two each, some
# hundreds in a run: a process makes four and hands them out in turn, so the providers of one
# test never share a key (a response of one provider never verifies with another's).
_KEYS: list[RSAKey] = []
_TURN = itertools.count()


def provider_key() -> RSAKey:
    """A signing key (kid ``k1``) for a provider, not the key of the one made before it."""
    index = next(_TURN) % 4
    if index == len(_KEYS):
        _KEYS.append(
            RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256", "use": "sig"})
        )
    return _KEYS[index]


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@dataclass
class FakeProvider:
    issuer: str = "https://idp.example"
    client_id: str = "mcpauth-client"
    client_secret: str = "upstream-client-secret-0123"
    clock: Callable[[], float] = time.time
    key: RSAKey = field(default_factory=provider_key)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)  # "GET /path" of every call
    token_requests: list[dict[str, str]] = field(default_factory=list)
    # a test's replacement for the token endpoint's answer (called with the request)
    token_response: Callable[[httpx2.Request], Awaitable[httpx2.Response]] | None = None
    stalled: anyio.Event = field(default_factory=anyio.Event)  # never set: a hung provider
    refresh_tokens: dict[str, int] = field(default_factory=dict)  # live refresh token -> serial
    issued: int = 0  # access tokens issued (the first one is "upstream-access-token")

    def __post_init__(self) -> None:
        self.metadata: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }
        self.jwks: dict[str, Any] = {"keys": [self.key.as_dict(private=False)]}

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        self.requests.append(f"{request.method} {path}")
        if request.url.host != urlsplit(self.issuer).hostname:
            return httpx2.Response(404)
        if path == "/.well-known/openid-configuration":
            return httpx2.Response(200, json=self.metadata)
        if path == "/jwks":
            return httpx2.Response(200, json=self.jwks)
        if path == "/token" and request.method == "POST":
            if self.token_response is not None:
                return await self.token_response(request)
            return self.token(request)
        return httpx2.Response(404)

    def approve(self, authorization_url: str, **claims: Any) -> dict[str, str]:
        """The person signs in at the provider; the parameters it sends the browser back with."""
        params = query(authorization_url)
        assert params["client_id"] == self.client_id
        code = secrets.token_urlsafe(24)
        self.codes[code] = {"params": params, "claims": {**ALICE, **claims}}
        return {"code": code, "state": params["state"], "iss": self.issuer}

    def id_token(self, claims: dict[str, Any], **header: Any) -> str:
        now = int(self.clock())
        payload = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 300}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode({"alg": "RS256", "kid": self.key.kid, **header}, payload, self.key)

    def token(self, request: httpx2.Request) -> httpx2.Response:
        form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
        self.token_requests.append(form)
        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {basic}":
            return httpx2.Response(401, json={"error": "invalid_client"})
        if form.get("grant_type") == "refresh_token":
            if self.refresh_tokens.pop(form.get("refresh_token", ""), None) is None:
                return httpx2.Response(400, json={"error": "invalid_grant"})
            return httpx2.Response(200, json=self._tokens())
        issued = self.codes.pop(form.get("code", ""), None)
        if issued is None or form.get("grant_type") != "authorization_code":
            return httpx2.Response(400, json={"error": "invalid_grant"})
        params = issued["params"]
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if challenge.rstrip(b"=").decode() != params["code_challenge"]:
            return httpx2.Response(400, json={"error": "invalid_grant"})
        if form.get("redirect_uri") != params["redirect_uri"]:
            return httpx2.Response(400, json={"error": "invalid_grant"})
        claims = {"nonce": params["nonce"], **issued["claims"]}
        return httpx2.Response(200, json={**self._tokens(), "id_token": self.id_token(claims)})

    def _tokens(self) -> dict[str, Any]:
        """A new access token (numbered after the first) and a rotated refresh token."""
        self.issued += 1
        refresh = f"upstream-refresh-{secrets.token_urlsafe(8)}"
        self.refresh_tokens[refresh] = self.issued
        access = "upstream-access-token" if self.issued == 1 else f"upstream-access-{self.issued}"
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 300,
            "refresh_token": refresh,
        }
