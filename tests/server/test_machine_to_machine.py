"""client_credentials for pre-registered confidential clients, with client_secret_basic and
private_key_jwt (RFC 7523 §2.2) authentication (AS-X1; docs/security.md T19, T22)."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import admin

from ..conftest import ISSUER
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def basic(client_id: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


@pytest.fixture
def secret_client(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth,
        name="CI bot",
        grant_types=["client_credentials"],
        scopes=["mcp:tools"],
    )


@pytest.fixture
def key() -> jwt.PrivateKey:
    return jwt.generate_private_key("ES256")


@pytest.fixture
def jwt_client(seeded: Starlette, key: jwt.PrivateKey) -> dict[str, Any]:
    jwks = {"keys": [jwt.public_jwk(key.public_key(), kid="k1", alg="ES256")]}
    return admin.add_client(
        seeded.state.mcpauth,
        name="Agent",
        grant_types=["client_credentials"],
        auth_method="private_key_jwt",
        jwks=jwks,
        scopes=["mcp:tools", "mcp:admin"],
    )


def assertion(key: jwt.PrivateKey, client_id: str, **changes: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": ISSUER,
        "iat": now,
        "exp": now + 60,
        "jti": secrets.token_urlsafe(16),
    }
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, alg="ES256", kid="k1", typ="JWT")


def cc_form(**extra: str) -> dict[str, str]:
    return {"grant_type": "client_credentials", "resource": RESOURCE, **extra}


def claims_of(app: Starlette, token: str) -> dict[str, Any]:
    return jwt.verify(
        token, jwt.key_set(app.state.mcpauth.keys.jwks()), issuer=ISSUER, audience=RESOURCE
    )


async def test_asx1_client_secret_basic_gets_a_token_whose_subject_is_the_client(
    http: httpx2.AsyncClient, secret_client: dict[str, Any], seeded: Starlette
) -> None:
    response = await http.post(
        "/token",
        data=cc_form(),
        headers=basic(secret_client["client_id"], secret_client["client_secret"]),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "refresh_token" not in body
    claims = claims_of(seeded, body["access_token"])
    assert claims["sub"] == claims["client_id"] == secret_client["client_id"]  # T22
    assert claims["gty"] == "client_credentials"
    assert claims["scope"] == "mcp:tools"


async def test_client_credentials_scopes_are_limited_to_the_clients_allowed_scopes(
    http: httpx2.AsyncClient, secret_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/token",
        data=cc_form(scope="mcp:admin"),
        headers=basic(secret_client["client_id"], secret_client["client_secret"]),
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"


async def test_client_credentials_resource_must_be_registered(
    http: httpx2.AsyncClient, secret_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/token",
        data=cc_form(resource="https://elsewhere.example/mcp"),
        headers=basic(secret_client["client_id"], secret_client["client_secret"]),
    )
    assert response.json()["error"] == "invalid_target"


async def test_a_client_without_the_grant_is_unauthorized_client(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    web = admin.add_client(seeded.state.mcpauth, name="Web", redirect_uris=["https://w.example/cb"])
    response = await http.post(
        "/token", data=cc_form(), headers=basic(web["client_id"], web["client_secret"])
    )
    assert response.json()["error"] == "unauthorized_client"


async def test_asx1_private_key_jwt_authenticates_a_client(
    http: httpx2.AsyncClient, jwt_client: dict[str, Any], key: jwt.PrivateKey, seeded: Starlette
) -> None:
    cid = jwt_client["client_id"]
    form = cc_form(
        client_assertion_type=ASSERTION_TYPE,
        client_assertion=assertion(key, cid),
        scope="mcp:tools mcp:admin",
    )
    response = await http.post("/token", data=form)
    assert response.status_code == 200, response.text
    assert claims_of(seeded, response.json()["access_token"])["sub"] == cid


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"aud": "https://other.example"}, "aud names another server"),
        ({"sub": "someone-else"}, "sub differs from client_id"),
        ({"exp": int(time.time()) - 120}, "expired"),
        ({"exp": int(time.time()) + 3600}, "valid for too long"),
        ({"jti": None}, "no jti"),
        ({"exp": None}, "no exp"),
    ],
)
async def test_asx1_bad_client_assertions_are_invalid_client(
    http: httpx2.AsyncClient,
    jwt_client: dict[str, Any],
    key: jwt.PrivateKey,
    changes: dict[str, Any],
    why: str,
) -> None:
    cid = jwt_client["client_id"]
    form = cc_form(
        client_assertion_type=ASSERTION_TYPE, client_assertion=assertion(key, cid, **changes)
    )
    response = await http.post("/token", data=form)
    assert response.status_code == 401, why
    assert response.json()["error"] == "invalid_client"


async def test_asx1_an_assertion_signed_by_another_key_is_invalid_client(
    http: httpx2.AsyncClient, jwt_client: dict[str, Any]
) -> None:
    other = jwt.generate_private_key("ES256")
    form = cc_form(
        client_assertion_type=ASSERTION_TYPE,
        client_assertion=assertion(other, jwt_client["client_id"]),
    )
    response = await http.post("/token", data=form)
    assert response.json()["error"] == "invalid_client"


async def test_asx1_a_replayed_assertion_jti_is_refused(
    http: httpx2.AsyncClient, jwt_client: dict[str, Any], key: jwt.PrivateKey
) -> None:
    signed = assertion(key, jwt_client["client_id"])
    form = cc_form(client_assertion_type=ASSERTION_TYPE, client_assertion=signed)
    assert (await http.post("/token", data=form)).status_code == 200
    replay = await http.post("/token", data=form)
    assert replay.status_code == 401
    assert "already used" in replay.json()["error_description"]


async def test_asx1_the_token_endpoint_is_an_accepted_audience(
    http: httpx2.AsyncClient, jwt_client: dict[str, Any], key: jwt.PrivateKey
) -> None:
    signed = assertion(key, jwt_client["client_id"], aud=f"{ISSUER}/token")
    response = await http.post(
        "/token", data=cc_form(client_assertion_type=ASSERTION_TYPE, client_assertion=signed)
    )
    assert response.status_code == 200


async def test_a_secret_cannot_stand_in_for_a_registered_private_key_jwt(
    http: httpx2.AsyncClient, jwt_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/token", data=cc_form(), headers=basic(jwt_client["client_id"], "guess")
    )
    assert response.json()["error"] == "invalid_client"


async def test_asx1_metadata_advertises_private_key_jwt_and_its_algorithms(
    http: httpx2.AsyncClient,
) -> None:
    meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert "private_key_jwt" in meta["token_endpoint_auth_methods_supported"]
    assert "client_secret_basic" in meta["token_endpoint_auth_methods_supported"]
    assert "ES256" in meta["token_endpoint_auth_signing_alg_values_supported"]
    assert "client_credentials" in meta["grant_types_supported"]


async def test_a_cached_client_credentials_request_is_answered_without_a_worker_thread(
    http: httpx2.AsyncClient, secret_client: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpauth.server.tokens import endpoint as token_endpoint

    hops: list[str] = []
    real = token_endpoint.run_blocking

    async def counting(func: Any, *args: Any) -> Any:
        hops.append(func.__name__)
        return await real(func, *args)

    monkeypatch.setattr(token_endpoint, "run_blocking", counting)
    headers = basic(secret_client["client_id"], secret_client["client_secret"])
    first = await http.post("/token", data=cc_form(), headers=headers)
    second = await http.post("/token", data=cc_form(), headers=headers)
    assert first.status_code == second.status_code == 200
    assert hops == [
        "_respond"
    ]  # the first loads client, lockouts and resources; the second is cached


async def test_a_removed_client_is_refused_at_once_in_this_process(
    http: httpx2.AsyncClient, secret_client: dict[str, Any], seeded: Starlette
) -> None:
    headers = basic(secret_client["client_id"], secret_client["client_secret"])
    assert (await http.post("/token", data=cc_form(), headers=headers)).status_code == 200
    admin.remove_client(seeded.state.mcpauth, secret_client["client_id"])
    response = await http.post("/token", data=cc_form(), headers=headers)
    assert response.status_code == 401


async def test_a_changed_resource_changes_the_next_token_at_once_in_this_process(
    http: httpx2.AsyncClient, secret_client: dict[str, Any], seeded: Starlette
) -> None:
    # the same request again and again: what it was granted is kept only as long as the
    # registered resources it was decided with
    ctx = seeded.state.mcpauth
    headers = basic(secret_client["client_id"], secret_client["client_secret"])
    first = await http.post("/token", data=cc_form(), headers=headers)
    assert claims_of(seeded, first.json()["access_token"])["scope"] == "mcp:tools"
    admin.remove_resource(ctx, RESOURCE)
    gone = await http.post("/token", data=cc_form(), headers=headers)
    assert gone.json()["error"] == "invalid_target"
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools", "mcp:read"], default_scopes=[])
    back = await http.post("/token", data=cc_form(), headers=headers)
    assert claims_of(seeded, back.json()["access_token"])["scope"] == "mcp:tools"
    admin.remove_resource(ctx, RESOURCE)
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:read"])  # none the client may have
    refused = await http.post("/token", data=cc_form(), headers=headers)
    assert refused.json()["error"] == "invalid_scope"
