"""Scopes as the real MCP clients ask for them: what the server cannot grant is narrowed away
(RFC 6749 §3.3) and every request below ends in a token, never an error page. Narrowing never
widens: a scope of the resource the grant does not hold still needs consent at the
authorization endpoint and is refused on refresh."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import admin, create_app
from mcpauth.server.config import Settings

from ..conftest import ISSUER
from ..oauth import (
    authorization_params,
    follow,
    forms,
    pkce_pair,
    register_public_client,
    submit,
)
from .conftest import RESOURCE, add_user
from .test_token import get_code, redeem, refresh, tokens

pytestmark = pytest.mark.anyio


def claims_of(app: Starlette, access_token: str, audience: str = RESOURCE) -> dict[str, Any]:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return jwt.verify(access_token, keys, issuer=ISSUER, audience=audience)


# (what the client asks for, who asks it that way, the granted scope in the token response)
AS_ASKED = [
    ("openid", "an OpenID client", "mcp:tools openid"),
    (
        "openid profile email offline_access mcp:tools",
        "mcp-remote's last fallback",
        "mcp:tools openid profile email",
    ),
    ("claudeai", "claude.ai", "mcp:tools"),
    ("read write", "claude.ai", "mcp:tools"),
    ("offline_access", "Claude Code, the operator's setting off", "mcp:tools"),
    ("mcp:tools offline_access", "Claude Code", "mcp:tools"),
    ("", "Gemini CLI's empty scope", "mcp:tools"),
]


@pytest.mark.parametrize(("scope", "who", "granted"), AS_ASKED, ids=[a[0] for a in AS_ASKED])
async def test_each_scope_request_of_the_real_clients_ends_in_a_token(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
    seeded: Starlette,
    scope: str,
    who: str,
    granted: str,
) -> None:
    body = await tokens(http, public_client, scope=scope)
    assert body["scope"] == granted
    # offline_access narrowed away changes nothing: a client registered for the
    # refresh_token grant gets a refresh token either way
    assert body["refresh_token"]
    # the OpenID scopes are about the client, not the resource: never in the access token
    assert claims_of(seeded, body["access_token"])["scope"] == "mcp:tools"
    assert ("id_token" in body) == ("openid" in granted.split())


async def test_the_granted_scope_is_a_string_even_when_nothing_could_be_granted(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    other = "http://127.0.0.1:8001/mcp"  # a resource with no default scopes
    code, verifier = await get_code(
        http, public_client["client_id"], resource=other, scope="claudeai"
    )
    response = await redeem(http, public_client["client_id"], code, verifier, resource=other)
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == ""  # never null (the TS SDK refuses null)


async def test_a_scope_of_the_resource_not_yet_granted_still_needs_consent(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    await tokens(http, public_client, scope="mcp:tools")
    _, challenge = pkce_pair()
    params = authorization_params(
        public_client["client_id"],
        challenge,
        redirect_uri="http://127.0.0.1:5555/callback",
        scope="mcp:tools mcp:admin claudeai",
    )
    page = await follow(http, await http.get("/authorize", params=params))
    assert page.status_code == 200
    assert forms(page.text)[0].buttons.get("action")  # the consent page, not a code
    assert "Administer" in page.text
    assert "claudeai" not in page.text  # narrowed away, never shown as a permission


async def test_the_openid_scopes_are_shown_in_plain_words_on_the_consent_page(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(
        public_client["client_id"],
        challenge,
        redirect_uri="http://127.0.0.1:5555/callback",
        scope="openid profile email mcp:tools",
    )
    page = await follow(http, await http.get("/authorize", params=params))
    page = await follow(
        http, await submit(http, page, {"username": "alice", "password": "correct horse battery"})
    )
    assert "Know who you are" in page.text
    assert "See your name" in page.text
    assert "See your email address" in page.text


async def test_an_administrators_scope_list_still_refuses_a_resource_scope_outside_it(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = admin.add_client(
        seeded.state.mcpauth,
        name="Bound",
        redirect_uris=["https://app.example/cb"],
        auth_method="none",
        scopes=["mcp:tools"],
    )
    _, challenge = pkce_pair()
    params = authorization_params(
        client["client_id"],
        challenge,
        redirect_uri="https://app.example/cb",
        scope="mcp:tools mcp:admin openid",
    )
    response = await http.get("/authorize", params=params)
    assert "error=invalid_scope" in response.headers["location"]


@pytest.fixture
def offline_app(make_settings: Callable[..., Settings], password_hash: str) -> Starlette:
    app = create_app(make_settings(offline_access=True))
    add_user(app, "alice", password_hash)
    admin.add_resource(
        app.state.mcpauth,
        RESOURCE,
        scopes=["mcp:tools=Use the tools"],
        default_scopes=["mcp:tools"],
        is_default=True,
    )
    return app


async def test_offline_access_when_the_operator_offers_it_is_consented_and_listed(
    offline_app: Starlette,
) -> None:
    transport = httpx2.ASGITransport(app=offline_app, client=("203.0.113.7", 50000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        meta = (await http.get("/.well-known/oauth-authorization-server")).json()
        assert "offline_access" in meta["scopes_supported"]
        client = await register_public_client(http)
        _, challenge = pkce_pair()
        params = authorization_params(
            client["client_id"],
            challenge,
            redirect_uri="http://127.0.0.1:5555/callback",
            scope="mcp:tools offline_access",
        )
        page = await follow(http, await http.get("/authorize", params=params))
        page = await follow(
            http,
            await submit(http, page, {"username": "alice", "password": "correct horse battery"}),
        )
        assert "stay connected until you revoke it" in page.text
        body = await tokens(http, client, scope="mcp:tools offline_access")
        assert body["refresh_token"]
        assert body["scope"] == "mcp:tools"  # offline_access is the refresh token, not a scope


REFRESH_SCOPES = [
    ("mcp:tools", "a subset", "mcp:tools", "mcp:tools"),
    ("offline_access", "Goose and rmcp", "mcp:tools mcp:admin openid", "mcp:tools mcp:admin"),
    (
        "mcp:tools mcp:admin offline_access claudeai",
        "LibreChat's registration scope",
        "mcp:tools mcp:admin",
        "mcp:tools mcp:admin",
    ),
    ("mcp:admin openid", "a subset with openid", "mcp:admin openid", "mcp:admin"),
    ("read write", "nothing the grant knows", "mcp:tools mcp:admin openid", "mcp:tools mcp:admin"),
]


@pytest.mark.parametrize(
    ("scope", "who", "granted", "in_token"), REFRESH_SCOPES, ids=[r[1] for r in REFRESH_SCOPES]
)
async def test_a_refresh_scope_within_the_grant_is_accepted(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
    seeded: Starlette,
    scope: str,
    who: str,
    granted: str,
    in_token: str,
) -> None:
    first = await tokens(http, public_client, scope="mcp:tools mcp:admin openid")
    response = await refresh(http, public_client["client_id"], first["refresh_token"], scope=scope)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scope"] == granted
    assert claims_of(seeded, body["access_token"])["scope"] == in_token


@pytest.mark.parametrize("scope", ["mcp:tools mcp:admin", "mcp:tools openid", "profile"])
async def test_a_refresh_never_widens_the_grant(
    http: httpx2.AsyncClient, public_client: dict[str, Any], scope: str
) -> None:
    first = await tokens(http, public_client, scope="mcp:tools")
    response = await refresh(http, public_client["client_id"], first["refresh_token"], scope=scope)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"


async def test_client_credentials_narrows_what_it_cannot_grant(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    bot = admin.add_client(
        seeded.state.mcpauth, name="Bot", grant_types=["client_credentials"], scopes=["mcp:tools"]
    )
    pair = f"{bot['client_id']}:{bot['client_secret']}".encode()
    headers = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    form = {"grant_type": "client_credentials", "resource": RESOURCE}
    for asked in ("offline_access", "openid read write", "mcp:tools claudeai"):
        response = await http.post("/token", data={**form, "scope": asked}, headers=headers)
        assert response.status_code == 200, (asked, response.text)
        assert response.json()["scope"] == "mcp:tools"
        assert "id_token" not in response.json()  # no person, no ID token
    refused = await http.post("/token", data={**form, "scope": "mcp:admin"}, headers=headers)
    assert refused.json()["error"] == "invalid_scope"  # the administrator's list binds
    # narrowing never turns "none of this resource's scopes" into a token for it
    other = "http://127.0.0.1:8001/mcp"  # offers other:read, which Bot may not have
    for asked in (None, "mcp:tools", "claudeai"):
        data = {**form, "resource": other} | ({"scope": asked} if asked else {})
        response = await http.post("/token", data=data, headers=headers)
        assert response.status_code == 400, (asked, response.text)
        assert response.json()["error"] == "invalid_scope"


async def test_the_resource_scopes_of_the_server_itself_cannot_be_registered(
    seeded: Starlette,
) -> None:
    with pytest.raises(admin.AdminError, match="scope of the authorization server"):
        admin.add_resource(seeded.state.mcpauth, "http://127.0.0.1:8003/mcp", scopes=["email"])


async def test_a_registration_scope_copied_from_scopes_supported_is_accepted(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    # LibreChat, mcp-remote and others register with the server's scopes_supported, which
    # lists the OpenID scopes now
    meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    client = await register_public_client(http, scope=" ".join(meta["scopes_supported"]))
    assert set(client["scope"].split()) == set(meta["scopes_supported"])
