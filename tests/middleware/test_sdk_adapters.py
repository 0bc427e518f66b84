"""Verifiers across the MCP Python SDK boundary, both ways: an SDK-style verifier (returns the
SDK's AccessToken or None) works as the middleware's verifier, audience still checked, and
never yields a 500; an mcpauth verifier works as the SDK's own bearer backend's verifier."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.requests import HTTPConnection

from mcpauth.errors import InvalidToken
from mcpauth.middleware import ForSDK, FromSDK
from mcpauth.middleware.protected_resource import default_verifier

from .conftest import MiddlewareFactory
from .helpers import ISSUER, OTHER_RESOURCE, RESOURCE, FakeAuthorizationServer, RecordingApp

pytestmark = pytest.mark.anyio


class SDKStyleVerifier:
    """What an SDK user writes: AccessToken for the tokens it knows, None for the rest."""

    def __init__(self, tokens: dict[str, AccessToken]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)


def access(resource: str | None, **extra: Any) -> AccessToken:
    return AccessToken(
        token="t", client_id="c1", scopes=["mcp:basic"], resource=resource, subject="bob", **extra
    )


async def call(app: Any, token: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://mcp.example.com") as http:
        return await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {token}"},
        )


async def test_an_sdk_style_verifier_works_in_the_middleware_and_never_yields_a_500(
    protect: MiddlewareFactory, recording_app: RecordingApp
) -> None:
    verifier = SDKStyleVerifier(
        {"good": access(RESOURCE), "other": access(OTHER_RESOURCE), "unsaid": access(None)}
    )
    app = protect(verifier=verifier)
    good = await call(app, "good")
    assert good.status_code == 200
    assert recording_app.calls[-1]["subject"] == "bob"
    for token in ("other", "unsaid", "unknown"):  # another audience, no audience, refused
        refused = await call(app, token)
        assert refused.status_code == 401
        assert "invalid_token" in refused.headers["www-authenticate"]
    assert len(recording_app.calls) == 1


async def test_from_sdk_trusts_an_unsaid_audience_only_when_told_the_verifier_checked_it() -> None:
    verifier = SDKStyleVerifier({"unsaid": access(None)})
    with pytest.raises(InvalidToken):
        await FromSDK(verifier, resource=RESOURCE).verify_token("unsaid")
    verified = await FromSDK(verifier, resource=RESOURCE, audience_checked=True).verify_token(
        "unsaid"
    )
    assert (verified.subject, verified.client_id, verified.resource) == ("bob", "c1", RESOURCE)


async def test_an_mcpauth_verifier_works_as_the_sdks_token_verifier(
    auth_server: FakeAuthorizationServer, as_http: httpx.AsyncClient
) -> None:
    verifier = ForSDK(default_verifier(RESOURCE, [ISSUER], as_http))  # mcpauth's JWT verifier
    backend = BearerAuthBackend(verifier, resource_server_url=RESOURCE)  # the SDK's own

    def connection(token: str) -> HTTPConnection:
        headers = [(b"authorization", f"Bearer {token}".encode())]
        return HTTPConnection({"type": "http", "headers": headers})

    good = await backend.authenticate(connection(auth_server.mint(scope="mcp:basic mcp:x")))
    assert good is not None
    credentials, user = good
    assert credentials.scopes == ["mcp:basic", "mcp:x"]
    assert user.access_token.subject == "alice"
    assert user.access_token.resource == RESOURCE
    assert await backend.authenticate(connection(auth_server.mint(aud=OTHER_RESOURCE))) is None
    assert await backend.authenticate(connection("garbage")) is None
