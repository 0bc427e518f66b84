"""Verifiers across the MCP Python SDK boundary, both ways: an SDK-style verifier (returns the
SDK's AccessToken or None) works in the middleware through FromSDK, audience still checked;
passed unwrapped where an mcpauth verifier belongs it is refused at construction with a
TypeError (not a 500 at the first request); an mcpauth verifier, through ForSDK, is the
``token_verifier=`` of a real SDK server app driven over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, ProviderTokenVerifier
from mcp.server.auth.provider import TokenVerifier as SDKTokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from mcpauth.errors import FetchError, InvalidToken, ServerError, TemporarilyUnavailable
from mcpauth.middleware import (
    ForSDK,
    FromSDK,
    JWKSCache,
    JWTVerifier,
    MultiIssuerVerifier,
    ProtectedResourceMiddleware,
    VerifiedToken,
)

from .conftest import MiddlewareFactory
from .helpers import ISSUER, OTHER_RESOURCE, RESOURCE, FakeAuthorizationServer, RecordingApp

pytestmark = pytest.mark.anyio


class SDKStyleVerifier:
    """What an SDK user writes: AccessToken for the tokens it knows, None for the rest."""

    def __init__(self, tokens: dict[str, AccessToken]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)


class SubclassOfTheSDKProtocol(SDKTokenVerifier):
    async def verify_token(self, token):  # type: ignore[no-untyped-def]  # no annotation at all
        return None


class Unannotated:
    """A duck-typed verifier whose type says nothing; it returns the SDK's AccessToken."""

    def __init__(self, tokens: dict[str, AccessToken]) -> None:
        self.tokens = tokens

    async def verify_token(self, token):  # type: ignore[no-untyped-def]
        return self.tokens.get(token)


def access(resource: str | None, **extra: Any) -> AccessToken:
    return AccessToken(
        token="t", client_id="c1", scopes=["mcp:basic"], resource=resource, subject="bob", **extra
    )


async def call(app: Any, token: str) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="https://mcp.example.com") as http:
        return await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {token}"},
        )


async def test_an_sdk_verifier_works_in_the_middleware_through_from_sdk(
    protect: MiddlewareFactory, recording_app: RecordingApp
) -> None:
    sdk = SDKStyleVerifier(
        {"good": access(RESOURCE), "other": access(OTHER_RESOURCE), "unsaid": access(None)}
    )
    app = protect(verifier=FromSDK(sdk, resource=RESOURCE))
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


SDK_VERIFIERS = {
    "annotated AccessToken | None": lambda: SDKStyleVerifier({}),
    "subclass of the SDK protocol": SubclassOfTheSDKProtocol,
    "the SDK's ProviderTokenVerifier": lambda: ProviderTokenVerifier(object()),  # type: ignore[arg-type]
    "ForSDK (the other direction)": lambda: ForSDK(JWTVerifier(ISSUER, RESOURCE)),
}


@pytest.mark.parametrize("make", SDK_VERIFIERS.values(), ids=SDK_VERIFIERS.keys())
async def test_an_sdk_verifier_where_an_mcpauth_one_belongs_is_a_type_error_at_construction(
    make: Any, recording_app: RecordingApp
) -> None:
    with pytest.raises(TypeError, match=r"ProtectedResourceMiddleware.*FromSDK\(verifier"):
        ProtectedResourceMiddleware(
            recording_app, resource=RESOURCE, authorization_servers=[ISSUER], verifier=make()
        )
    with pytest.raises(TypeError, match=r"MultiIssuerVerifier.*FromSDK"):
        MultiIssuerVerifier({ISSUER: make()})
    with pytest.raises(TypeError, match=r"ForSDK.*FromSDK"):
        ForSDK(make())


@pytest.mark.parametrize("thing", [JWKSCache(ISSUER), "a token", None], ids=["keys", "str", "None"])
async def test_something_that_is_no_verifier_is_a_type_error_naming_it(
    thing: Any, recording_app: RecordingApp
) -> None:
    if thing is not None:
        with pytest.raises(TypeError, match=f"needs a token verifier .*not {type(thing).__name__}"):
            ProtectedResourceMiddleware(
                recording_app, resource=RESOURCE, authorization_servers=[ISSUER], verifier=thing
            )
    with pytest.raises(TypeError, match="needs a token verifier"):
        ForSDK(thing)
    with pytest.raises(TypeError, match="FromSDK needs a verifier with verify_token"):
        FromSDK(thing, resource=RESOURCE)


async def test_a_verifier_whose_type_says_nothing_still_has_its_audience_checked(
    protect: MiddlewareFactory, recording_app: RecordingApp
) -> None:
    app = protect(verifier=Unannotated({"good": access(RESOURCE), "other": access(OTHER_RESOURCE)}))
    assert (await call(app, "good")).status_code == 200
    for token in ("other", "unknown"):
        assert (await call(app, token)).status_code == 401
    assert len(recording_app.calls) == 1


def sdk_server(verifier: ForSDK) -> Starlette:
    """The SDK's own server with its own bearer auth, mcpauth verifying the tokens. The SDK's
    resource check is off, so only mcpauth's audience check stands between a token for another
    resource and the tool."""
    mcp = MCPServer(
        "sdk-with-mcpauth",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=ISSUER,  # type: ignore[arg-type]
            resource_server_url=RESOURCE,  # type: ignore[arg-type]
            required_scopes=["mcp:basic"],
            validate_token_resource=False,
        ),
    )

    @mcp.tool()
    def whoami() -> str:
        token = get_access_token()
        if token is None:
            return "anonymous"
        return f"{token.subject}|{token.client_id}|{' '.join(token.scopes)}|{token.resource}"

    security = TransportSecuritySettings(allowed_hosts=["mcp.example.com"])
    return mcp.streamable_http_app(
        json_response=True, stateless_http=True, transport_security=security
    )


async def tool_call(http: httpx2.AsyncClient, token: str | None) -> httpx2.Response:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami"}}
    return await http.post("/mcp", json=message, headers=headers)


@asynccontextmanager
async def serve_sdk(app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    async with (
        app.router.lifespan_context(app),  # the SDK's session manager
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app), base_url="https://mcp.example.com"
        ) as http,
    ):
        yield http


async def test_an_mcpauth_verifier_is_the_token_verifier_of_a_real_sdk_server(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    verifier = ForSDK(JWTVerifier(ISSUER, RESOURCE, http=as_http))
    async with verifier, serve_sdk(sdk_server(verifier)) as http:
        good = await tool_call(http, auth_server.mint(scope="mcp:basic mcp:x"))
        assert good.status_code == 200
        result = good.json()["result"]["structuredContent"]["result"]
        assert result == f"alice|client-1|mcp:basic mcp:x|{RESOURCE}"

        refused = {
            "no token": await tool_call(http, None),
            "another audience": await tool_call(http, auth_server.mint(aud=OTHER_RESOURCE)),
            "expired": await tool_call(http, auth_server.mint(exp=1)),
            "not a JWT": await tool_call(http, "garbage"),
        }
        for response in refused.values():
            assert response.status_code == 401
            assert 'error="invalid_token"' in response.headers["www-authenticate"]
        short = await tool_call(http, auth_server.mint(scope="mcp:x"))
        assert short.status_code == 403  # the SDK's required_scopes, on mcpauth's scopes
        assert 'error="insufficient_scope"' in short.headers["www-authenticate"]


async def test_through_the_sdk_an_unreachable_authorization_server_is_a_401_not_a_500(
    auth_server: FakeAuthorizationServer, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(refuse)) as down:
        verifier = ForSDK(JWTVerifier(ISSUER, RESOURCE, http=down))
        async with serve_sdk(sdk_server(verifier)) as http:
            response = await tool_call(http, auth_server.mint())
    assert response.status_code == 401  # the SDK lets a verifier say only yes or no
    assert "cannot verify a token right now" in caplog.text


class Raising:
    """An mcpauth verifier that cannot decide: it raises what it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def verify_token(self, token: str) -> VerifiedToken:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        TemporarilyUnavailable("keys unavailable"),
        ServerError("the introspection endpoint refused this resource server"),
        FetchError("https://as.internal.example/jwks answered 502"),
        InvalidToken("The access token has expired"),
    ],
    ids=["503", "500", "fetch error", "invalid"],
)
async def test_for_sdk_answers_no_instead_of_raising_into_the_sdk(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    assert await ForSDK(Raising(error)).verify_token("t") is None
    if isinstance(error, InvalidToken):
        assert "cannot verify" not in caplog.text  # a refused token is no incident
    else:
        assert "cannot verify a token right now: " + str(error) in caplog.text
