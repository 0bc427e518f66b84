"""DPoP at the authorization server beyond the token binding itself (RFC 9449,
docs/security.md T30): server nonces that every replica accepts, ``dpop_jkt`` at the
authorization endpoint, DPoP required per client (``dpop_bound_access_tokens``) and per
resource, bound tokens at introspection and revocation, and the CORS preflight that lets a
browser client send a proof. Replicas are two apps on one database with one secret (run on
PostgreSQL with ``MCPAUTH_TEST_DATABASE=postgresql``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.dpop import make_proof
from mcpauth.server import admin
from mcpauth.server.app import create_app
from mcpauth.server.config import Settings

from ..conftest import ISSUER
from ..oauth import authorization_params, pkce_pair, query, sign_in_and_approve
from .conftest import RESOURCE, add_user
from .test_token import claims_of, code_form, get_code, refresh

pytestmark = pytest.mark.anyio

TOKEN_URL = f"{ISSUER}/token"
KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())
OTHER_RESOURCE = "http://127.0.0.1:8001/mcp"


def proof(key: Any = KEY, **changes: Any) -> str:
    return make_proof(key, alg="ES256", method="POST", url=TOKEN_URL, **changes)


def thumbprint(key: Any) -> str:
    return jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))


@pytest.fixture
def bot(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth, name="bot", grant_types=["client_credentials"], scopes=["mcp:tools"]
    )


async def machine_token(
    http: httpx2.AsyncClient,
    bot: dict[str, Any],
    headers: dict[str, str] | None = None,
    **form: str,
) -> httpx2.Response:
    return await http.post(
        "/token",
        data={"grant_type": "client_credentials", **form},
        auth=(bot["client_id"], bot["client_secret"]),
        headers=headers or {},
    )


# --- nonces -------------------------------------------------------------------------------


class Replicas:
    """Two apps (replicas) on one database and secret, with one movable clock."""

    def __init__(self, settings: Settings) -> None:
        self.moment = [time.time()]
        self.apps = [create_app(settings, clock=self.clock) for _ in range(2)]

    def clock(self) -> float:
        return self.moment[0]


@pytest.fixture
async def replicas(
    make_settings: Callable[..., Settings], password_hash: str
) -> AsyncIterator[tuple[Replicas, list[httpx2.AsyncClient], dict[str, Any]]]:
    pair = Replicas(make_settings(dpop_nonce=True))
    ctx = pair.apps[0].state.mcpauth
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools"], is_default=True)
    add_user(pair.apps[0], "alice", password_hash)
    bot = admin.add_client(ctx, name="bot", grant_types=["client_credentials"])
    clients = [
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ISSUER)
        for app in pair.apps
    ]
    try:
        yield pair, clients, bot
    finally:
        for client in clients:
            await client.aclose()


async def test_a_proof_without_the_servers_nonce_gets_use_dpop_nonce_and_the_nonce(
    replicas: tuple[Replicas, list[httpx2.AsyncClient], dict[str, Any]],
) -> None:
    pair, (first, _), bot = replicas
    refused = await machine_token(first, bot, {"DPoP": proof(now=pair.clock())})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "use_dpop_nonce"
    nonce = refused.headers["DPoP-Nonce"]
    assert "DPoP-Nonce" in refused.headers["Access-Control-Expose-Headers"]
    granted = await machine_token(first, bot, {"DPoP": proof(nonce=nonce, now=pair.clock())})
    assert granted.status_code == 200, granted.text
    assert granted.json()["token_type"] == "DPoP"
    assert granted.headers["DPoP-Nonce"]  # every response hands out the current nonce
    wrong = await machine_token(first, bot, {"DPoP": proof(nonce="made-up", now=pair.clock())})
    assert wrong.json()["error"] == "use_dpop_nonce"


async def test_replicas_accept_each_others_nonces_and_share_the_jti_record(
    replicas: tuple[Replicas, list[httpx2.AsyncClient], dict[str, Any]],
) -> None:
    pair, (first, second), bot = replicas
    nonce = (await machine_token(first, bot, {"DPoP": proof(now=pair.clock())})).headers[
        "DPoP-Nonce"
    ]
    once = proof(nonce=nonce, now=pair.clock())
    at_second = await machine_token(second, bot, {"DPoP": once})
    assert at_second.status_code == 200, at_second.text
    replayed_at_first = await machine_token(first, bot, {"DPoP": once})
    assert replayed_at_first.status_code == 400
    assert replayed_at_first.json()["error"] == "invalid_dpop_proof"
    assert "used before" in replayed_at_first.json()["error_description"]


async def test_a_nonce_lasts_one_to_two_windows_then_a_new_one_is_needed(
    replicas: tuple[Replicas, list[httpx2.AsyncClient], dict[str, Any]],
) -> None:
    pair, (first, second), bot = replicas
    nonce = (await machine_token(first, bot, {"DPoP": proof(now=pair.clock())})).headers[
        "DPoP-Nonce"
    ]
    pair.moment[0] += 120
    still = await machine_token(second, bot, {"DPoP": proof(nonce=nonce, now=pair.clock())})
    assert still.status_code == 200, still.text
    pair.moment[0] += 240
    stale = await machine_token(second, bot, {"DPoP": proof(nonce=nonce, now=pair.clock())})
    assert stale.json()["error"] == "use_dpop_nonce"
    assert stale.headers["DPoP-Nonce"] != nonce


async def test_another_servers_nonce_is_not_accepted(
    replicas: tuple[Replicas, list[httpx2.AsyncClient], dict[str, Any]],
    make_settings: Callable[..., Settings],
) -> None:
    pair, (first, _), bot = replicas
    stranger = create_app(make_settings(dpop_nonce=True, secret_key="another secret, 32 chars!!"))
    foreign = stranger.state.mcpauth.dpop_nonces.current(int(pair.clock()))
    refused = await machine_token(first, bot, {"DPoP": proof(nonce=foreign, now=pair.clock())})
    assert refused.json()["error"] == "use_dpop_nonce"


async def test_without_nonces_no_nonce_header_is_sent(
    http: httpx2.AsyncClient, bot: dict[str, Any]
) -> None:
    granted = await machine_token(http, bot, {"DPoP": proof()})
    assert granted.status_code == 200
    assert "DPoP-Nonce" not in granted.headers


# --- dpop_jkt at the authorization endpoint -----------------------------------------------


async def code_for_key(
    http: httpx2.AsyncClient, client_id: str, jkt: str, redirect_uri: str
) -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    params = authorization_params(
        client_id, challenge, resource=RESOURCE, redirect_uri=redirect_uri, dpop_jkt=jkt
    )
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303, response.text
    return query(response.headers["location"])["code"], verifier


async def test_a_code_requested_with_dpop_jkt_is_redeemed_only_with_that_key(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    redirect = public_client["redirect_uris"][0]
    for headers in ({"DPoP": proof(OTHER)}, {}):
        code, verifier = await code_for_key(http, cid, thumbprint(KEY), redirect)
        form = code_form(cid, code, verifier, redirect_uri=redirect)
        refused = await http.post("/token", data=form, headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "invalid_grant"
        assert "dpop_jkt" in refused.json()["error_description"]
    code, verifier = await code_for_key(http, cid, thumbprint(KEY), redirect)
    form = code_form(cid, code, verifier, redirect_uri=redirect)
    granted = await http.post("/token", data=form, headers={"DPoP": proof()})
    assert granted.status_code == 200, granted.text
    assert claims_of(seeded, granted.json()["access_token"])["cnf"] == {"jkt": thumbprint(KEY)}


@pytest.mark.parametrize("value", ["short", "x" * 44, "a" * 42 + "!"])
async def test_a_malformed_dpop_jkt_is_refused_at_the_authorization_endpoint(
    http: httpx2.AsyncClient, seeded: Starlette, value: str
) -> None:
    client = admin.add_client(
        seeded.state.mcpauth,
        name="web app",
        redirect_uris=["http://127.0.0.1:5555/callback"],
        grant_types=["authorization_code"],
    )
    _, challenge = pkce_pair()
    params = authorization_params(client["client_id"], challenge, dpop_jkt=value)
    response = await http.get("/authorize", params=params)
    assert response.status_code == 303  # an operator's client: the error goes back to it
    answer = query(response.headers["location"])
    assert answer["error"] == "invalid_request"
    assert "dpop_jkt" in answer["error_description"]


# --- DPoP required ------------------------------------------------------------------------


async def test_a_client_registered_for_bound_tokens_must_send_a_proof(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    bound = admin.add_client(
        seeded.state.mcpauth, name="bound bot", grant_types=["client_credentials"], dpop_bound=True
    )
    refused = await machine_token(http, bound)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_dpop_proof"
    granted = await machine_token(http, bound, {"DPoP": proof()})
    assert granted.json()["token_type"] == "DPoP"


async def test_dynamic_registration_takes_dpop_bound_access_tokens_as_a_boolean_only(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    body = {
        "client_name": "x",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "token_endpoint_auth_method": "none",
    }
    wrong = await http.post("/register", json={**body, "dpop_bound_access_tokens": "yes"})
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "invalid_client_metadata"
    right = await http.post("/register", json={**body, "dpop_bound_access_tokens": True})
    assert right.status_code == 201
    assert right.json()["dpop_bound_access_tokens"] is True
    cid = right.json()["client_id"]
    code, verifier = await get_code(http, cid, redirect_uri="http://127.0.0.1/callback")
    form = code_form(cid, code, verifier, redirect_uri="http://127.0.0.1/callback")
    refused = await http.post("/token", data=form)
    assert refused.json()["error"] == "invalid_dpop_proof"
    # refused before the code was used: the retry with a proof redeems it
    granted = await http.post("/token", data=form, headers={"DPoP": proof()})
    assert granted.status_code == 200, granted.text


async def test_a_resource_that_requires_dpop_gets_bound_tokens_only(
    http: httpx2.AsyncClient, seeded: Starlette, bot: dict[str, Any]
) -> None:
    admin.add_resource(
        seeded.state.mcpauth, "http://127.0.0.1:8002/mcp", scopes=["x:y"], dpop_required=True
    )
    listed = {r["uri"]: r for r in admin.list_resources(seeded.state.mcpauth)}
    assert listed["http://127.0.0.1:8002/mcp"]["dpop_required"] is True
    assert listed[RESOURCE]["dpop_required"] is False
    strict = admin.add_client(
        seeded.state.mcpauth, name="strict bot", grant_types=["client_credentials"]
    )
    refused = await machine_token(http, strict, resource="http://127.0.0.1:8002/mcp")
    assert refused.json()["error"] == "invalid_dpop_proof"
    assert "DPoP-bound tokens only" in refused.json()["error_description"]
    granted = await machine_token(
        http, strict, {"DPoP": proof()}, resource="http://127.0.0.1:8002/mcp"
    )
    assert granted.status_code == 200, granted.text
    assert (await machine_token(http, strict, resource=RESOURCE)).json()["token_type"] == "Bearer"


# --- introspection, revocation, CORS ------------------------------------------------------


async def test_introspection_says_a_token_is_bound_and_to_which_key(
    http: httpx2.AsyncClient, seeded: Starlette, public_client: dict[str, Any]
) -> None:
    auditor = admin.add_client(
        seeded.state.mcpauth, name="rs", grant_types=["client_credentials"], introspect=True
    )
    cid = public_client["client_id"]
    redirect = public_client["redirect_uris"][0]
    code, verifier = await get_code(http, cid, redirect_uri=redirect)
    form = code_form(cid, code, verifier, redirect_uri=redirect)
    tokens = (await http.post("/token", data=form, headers={"DPoP": proof()})).json()
    auth = (auditor["client_id"], auditor["client_secret"])
    access = await http.post("/introspect", data={"token": tokens["access_token"]}, auth=auth)
    assert access.json()["token_type"] == "DPoP"
    assert access.json()["cnf"] == {"jkt": thumbprint(KEY)}
    refresh_info = await http.post(
        "/introspect", data={"token": tokens["refresh_token"]}, auth=auth
    )
    assert refresh_info.json()["cnf"] == {"jkt": thumbprint(KEY)}
    # a bound refresh token is revoked like any other, with no proof needed
    revoked = await http.post("/revoke", data={"token": tokens["refresh_token"], "client_id": cid})
    assert revoked.status_code == 200
    again = await refresh(http, cid, tokens["refresh_token"])
    assert again.status_code == 400
    assert again.json()["error"] in ("invalid_grant", "invalid_dpop_proof")
    after = await http.post("/introspect", data={"token": tokens["refresh_token"]}, auth=auth)
    assert after.json() == {"active": False}


async def test_the_cors_preflight_lets_a_browser_client_send_a_proof(
    http: httpx2.AsyncClient,
) -> None:
    preflight = await http.options(
        "/token",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "dpop, content-type",
        },
    )
    assert preflight.status_code == 204
    allowed = preflight.headers["Access-Control-Allow-Headers"].lower()
    assert "dpop" in [h.strip() for h in allowed.split(",")]
