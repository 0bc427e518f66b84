"""Token exchange (RFC 8693, docs/security.md T37): an MCP server the operator allowed to
exchange swaps its caller's access token for a token for another resource, for the same user,
with ``act`` naming itself; each way the exchange can be wrong is refused with the RFC's error
and issues nothing."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.errors import OAuthError
from mcpauth.middleware import JWTVerifier, ProtectedResourceMiddleware
from mcpauth.middleware.exchange import NoCaller, TokenExchanger
from mcpauth.oauth import TOKEN_EXCHANGE
from mcpauth.server import admin
from mcpauth.server.admin import AdminError

from ..conftest import ISSUER
from .conftest import RESOURCE
from .test_token import tokens

pytestmark = pytest.mark.anyio

DOWNSTREAM = "http://127.0.0.1:8001/mcp"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture
def mcp_server(seeded: Starlette) -> dict[str, Any]:
    """The MCP server at RESOURCE, registered to act for its callers at DOWNSTREAM."""
    return admin.add_client(
        seeded.state.mcpauth,
        name="demo MCP server",
        grant_types=[TOKEN_EXCHANGE],
        scopes=["other:read"],
        exchange_from=[RESOURCE],
        exchange_to=[DOWNSTREAM],
    )


async def caller_token(http: httpx2.AsyncClient, public_client: dict[str, Any]) -> dict[str, Any]:
    return await tokens(http, public_client)


async def exchange(
    http: httpx2.AsyncClient, client: dict[str, Any], subject: str, **form: str
) -> httpx2.Response:
    data = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": subject,
        "subject_token_type": ACCESS,
        "resource": DOWNSTREAM,
        **form,
    }
    data = {k: v for k, v in data.items() if v}
    return await http.post("/token", data=data, auth=(client["client_id"], client["client_secret"]))


def verified(app: Starlette, token: str, audience: str) -> dict[str, Any]:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return jwt.verify(token, keys, issuer=ISSUER, audience=audience)


async def test_a_server_gets_a_token_for_the_downstream_resource_as_its_caller(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caller = await caller_token(http, public_client)
    subject = verified(seeded, caller["access_token"], RESOURCE)
    with caplog.at_level(logging.INFO, logger="mcpauth"):
        response = await exchange(http, mcp_server, caller["access_token"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["issued_token_type"] == ACCESS
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "other:read"
    assert "refresh_token" not in body
    claims = verified(seeded, body["access_token"], DOWNSTREAM)
    assert claims["sub"] == subject["sub"]
    assert claims["act"] == {"sub": mcp_server["client_id"]}
    assert claims["client_id"] == mcp_server["client_id"]
    assert claims["exp"] <= subject["exp"]
    assert "token.exchanged" in caplog.text
    assert caller["access_token"] not in caplog.text
    # by audience instead of resource, the same
    by_audience = await exchange(
        http, mcp_server, caller["access_token"], resource="", audience=DOWNSTREAM
    )
    assert by_audience.status_code == 200, by_audience.text


async def test_revoking_the_users_grant_ends_the_exchanged_token_too(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    caller = await caller_token(http, public_client)
    downstream = (await exchange(http, mcp_server, caller["access_token"])).json()["access_token"]
    auditor = admin.add_client(
        seeded.state.mcpauth, name="rs", grant_types=["client_credentials"], introspect=True
    )
    auth = (auditor["client_id"], auditor["client_secret"])
    assert (await http.post("/introspect", data={"token": downstream}, auth=auth)).json()["active"]
    revoked = await http.post(
        "/revoke",
        data={"token": caller["refresh_token"], "client_id": public_client["client_id"]},
    )
    assert revoked.status_code == 200
    after = await http.post("/introspect", data={"token": downstream}, auth=auth)
    assert after.json() == {"active": False}
    again = await exchange(http, mcp_server, caller["access_token"])
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_request"


async def test_a_client_not_allowed_to_exchange_is_refused(
    http: httpx2.AsyncClient, seeded: Starlette, public_client: dict[str, Any]
) -> None:
    caller = await caller_token(http, public_client)
    bot = admin.add_client(seeded.state.mcpauth, name="bot", grant_types=["client_credentials"])
    response = await exchange(http, bot, caller["access_token"])
    assert response.status_code == 400
    assert response.json()["error"] == "unauthorized_client"


async def test_a_token_for_another_resource_or_another_target_is_refused(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    caller = await caller_token(http, public_client)
    other = (await exchange(http, mcp_server, caller["access_token"])).json()["access_token"]
    # a token issued for DOWNSTREAM is not one this server received from its callers
    from_elsewhere = await exchange(http, mcp_server, other)
    assert from_elsewhere.json()["error"] == "unauthorized_client"
    admin.add_resource(seeded.state.mcpauth, "http://127.0.0.1:8002/mcp", scopes=["x:y"])
    not_allowed = await exchange(
        http, mcp_server, caller["access_token"], resource="http://127.0.0.1:8002/mcp"
    )
    assert not_allowed.json()["error"] == "invalid_target"
    disagree = await exchange(http, mcp_server, caller["access_token"], audience=RESOURCE)
    assert disagree.json()["error"] == "invalid_target"


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"subject_token_type": ""}, "invalid_request"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:refresh_token"},
         "invalid_request"),
        ({"requested_token_type": "urn:ietf:params:oauth:token-type:id_token"}, "invalid_request"),
        ({"actor_token": "x", "actor_token_type": ACCESS}, "invalid_request"),
        ({"subject_token": "not-a-token"}, "invalid_request"),
        ({"resource": ""}, "invalid_target"),
    ],
    ids=["no subject type", "refresh token", "id token wanted",
         "actor token", "garbage subject", "no target"],
)  # fmt: skip
async def test_each_bad_request_gets_the_rfcs_error(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
    changes: dict[str, str],
    error: str,
) -> None:
    caller = await caller_token(http, public_client)
    response = await exchange(http, mcp_server, caller["access_token"], **changes)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error


async def test_scopes_an_exchange_cannot_grant_are_narrowed_away(
    http: httpx2.AsyncClient, public_client: dict[str, Any], mcp_server: dict[str, Any]
) -> None:
    # (these were invalid_scope before: the target's unknown scopes and offline_access are
    # now dropped as at the authorization endpoint; an exchanged token has no refresh token)
    caller = await caller_token(http, public_client)
    response = await exchange(
        http, mcp_server, caller["access_token"], scope="mcp:admin offline_access openid"
    )
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == "other:read"
    assert "refresh_token" not in response.json()


async def test_exchange_rights_are_the_operators_to_give(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    body = {
        "client_name": "x",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "exchange_from": [RESOURCE],
        "exchange_to": [DOWNSTREAM],
    }
    registered = await http.post("/register", json=body)
    assert registered.status_code == 400
    assert registered.json()["error"] == "invalid_client_metadata"
    with pytest.raises(AdminError, match="exchange_from and exchange_to"):
        admin.add_client(seeded.state.mcpauth, name="y", grant_types=[TOKEN_EXCHANGE])
    metadata = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert TOKEN_EXCHANGE in metadata["grant_types_supported"]


async def test_a_tool_behind_the_middleware_gets_a_downstream_token_in_one_call(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    """The middleware keeps the caller's token from the application; the exchanger uses it,
    and caches the answer per caller and resource."""
    exchanger = TokenExchanger(
        issuer=ISSUER,
        client_id=mcp_server["client_id"],
        client_secret=mcp_server["client_secret"],
        token_endpoint=f"{ISSUER}/token",
        http=http,
    )
    seen: list[str | None] = []

    async def tool(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization"))
        return JSONResponse({"token": await exchanger.token_for(DOWNSTREAM)})

    protected = ProtectedResourceMiddleware(
        Starlette(routes=[Route("/mcp", tool, methods=["POST"])]),
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        verifier=JWTVerifier(ISSUER, RESOURCE, http=http),
    )
    caller = await caller_token(http, public_client)
    transport = httpx2.ASGITransport(app=protected)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as mcp:
        headers = {"Authorization": f"Bearer {caller['access_token']}"}
        first = await mcp.post("/mcp", json={}, headers=headers)
        second = await mcp.post("/mcp", json={}, headers=headers)
    assert first.status_code == 200, first.text
    token = first.json()["token"]
    assert second.json()["token"] == token  # cached until shortly before it expires
    claims = verified(seeded, token, DOWNSTREAM)
    assert claims["act"] == {"sub": mcp_server["client_id"]}
    assert seen == [None, None]  # the application never saw the caller's token
    with pytest.raises(NoCaller):
        await exchanger.token_for(DOWNSTREAM)  # outside a request: no caller
    refused = TokenExchanger(
        issuer=ISSUER, client_id=mcp_server["client_id"], client_secret="wrong", http=http
    )
    with pytest.raises(OAuthError) as caught:
        await refused.token_for(DOWNSTREAM, subject_token=caller["access_token"])
    assert caught.value.error == "invalid_client"
