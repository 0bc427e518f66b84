"""Enterprise-managed authorization: the jwt-bearer grant with an ID-JAG from a trusted
identity provider (MCP AS-X2)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from .conftest import RESOURCE
from .test_machine_to_machine import basic

pytestmark = pytest.mark.anyio
IDP = "https://idp.example"
GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
IDP_KEY = jwt.generate_private_key("ES256")


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    jwks = {"keys": [jwt.public_jwk(IDP_KEY.public_key(), kid="idp-1", alg="ES256")]}
    return make_settings(trusted_idps={IDP: json.dumps(jwks)})


@pytest.fixture
def app(settings: Settings) -> Starlette:
    return create_app(settings)


@pytest.fixture
def ema_client(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(seeded.state.mcpauth, name="Enterprise agent", grant_types=[GRANT])


def id_jag(
    client_id: str, *, key: jwt.PrivateKey = IDP_KEY, typ: str = "oauth-id-jag+jwt", **changes: Any
) -> str:
    now = int(time.time())
    claims = {
        "iss": IDP,
        "sub": "employee-42",
        "aud": ISSUER,
        "client_id": client_id,
        "resource": RESOURCE,
        "jti": secrets.token_urlsafe(12),
        "iat": now,
        "exp": now + 300,
        "scope": "mcp:tools",
    }
    claims.update(changes)
    return jwt.encode(
        {k: v for k, v in claims.items() if v is not None}, key, alg="ES256", kid="idp-1", typ=typ
    )


async def exchange(
    http: httpx2.AsyncClient, client: dict[str, Any], assertion: str
) -> httpx2.Response:
    return await http.post(
        "/token",
        data={"grant_type": GRANT, "assertion": assertion},
        headers=basic(client["client_id"], client["client_secret"]),
    )


async def test_asx2_an_id_jag_is_exchanged_for_a_token_for_that_user(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], seeded: Starlette
) -> None:
    first = await exchange(http, ema_client, id_jag(ema_client["client_id"]))
    assert first.status_code == 200, first.text
    keys = jwt.key_set(seeded.state.mcpauth.keys.jwks())
    claims = jwt.verify(first.json()["access_token"], keys, issuer=ISSUER, audience=RESOURCE)
    assert claims["client_id"] == ema_client["client_id"]
    assert claims["scope"] == "mcp:tools"
    second = await exchange(http, ema_client, id_jag(ema_client["client_id"]))
    again = jwt.verify(second.json()["access_token"], keys, issuer=ISSUER, audience=RESOURCE)
    assert again["sub"] == claims["sub"]  # the same employee maps to the same local subject
    assert claims["sub"] != "employee-42"


async def test_asx2_grant_is_advertised_when_identity_providers_are_trusted(
    http: httpx2.AsyncClient,
) -> None:
    meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert GRANT in meta["grant_types_supported"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"typ": "JWT"}, "invalid_grant"),
        ({"aud": "https://other-as.example"}, "invalid_grant"),
        ({"aud": [{"issuer": ISSUER}]}, "invalid_grant"),  # an object names nobody (was a 500)
        ({"aud": [7, "https://other-as.example"]}, "invalid_grant"),
        ({"client_id": "someone-else"}, "invalid_grant"),
        ({"iss": "https://untrusted-idp.example"}, "invalid_grant"),
        ({"exp": int(time.time()) - 100}, "invalid_grant"),
        ({"jti": None}, "invalid_grant"),
        ({"resource": "https://unknown.example/mcp"}, "invalid_target"),
        ({"key": jwt.generate_private_key("ES256")}, "invalid_grant"),
    ],
)
async def test_asx2_bad_assertions_are_refused(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], kwargs: dict[str, Any], error: str
) -> None:
    kwargs = dict(kwargs)
    kwargs.setdefault("client_id", ema_client["client_id"])
    client_id = kwargs.pop("client_id")
    response = await exchange(http, ema_client, id_jag(client_id, **kwargs))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error


async def test_asx2_scopes_the_resource_does_not_offer_are_narrowed_away(
    http: httpx2.AsyncClient, ema_client: dict[str, Any]
) -> None:
    # (invalid_scope before: an unknown scope in the ID-JAG is now dropped, as everywhere)
    response = await exchange(
        http, ema_client, id_jag(ema_client["client_id"], scope="mcp:tools root")
    )
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == "mcp:tools"


async def test_asx2_a_replayed_id_jag_is_refused(
    http: httpx2.AsyncClient, ema_client: dict[str, Any]
) -> None:
    assertion = id_jag(ema_client["client_id"])
    assert (await exchange(http, ema_client, assertion)).status_code == 200
    replay = await exchange(http, ema_client, assertion)
    assert replay.json()["error"] == "invalid_grant"


async def test_asx2_the_client_must_authenticate(
    http: httpx2.AsyncClient, ema_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/token",
        data={
            "grant_type": GRANT,
            "assertion": id_jag(ema_client["client_id"]),
            "client_id": ema_client["client_id"],
        },
    )
    assert response.status_code == 401


async def test_asx2_the_assertions_amr_is_carried_into_the_token(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], seeded: Starlette
) -> None:
    response = await exchange(http, ema_client, id_jag(ema_client["client_id"], amr=["pwd"]))
    assert response.status_code == 200, response.text
    assert jwt.unverified_claims(response.json()["access_token"])["amr"] == ["pwd"]
    without = await exchange(http, ema_client, id_jag(ema_client["client_id"]))
    assert "amr" not in jwt.unverified_claims(without.json()["access_token"])  # none said


@pytest.mark.parametrize("amr", [None, ["pwd"], ["pwd", "otp"], "mfa", [["mfa"]]])
async def test_asx2_a_resource_that_requires_two_factors_needs_mfa_in_the_assertion(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], seeded: Starlette, amr: Any
) -> None:
    """docs/security.md T49: an ID-JAG for a one-factor sign-in (or one that says nothing of
    it, or says it in a form that is not an array of methods) reaches no resource that requires
    two factors."""
    admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=True)
    response = await exchange(http, ema_client, id_jag(ema_client["client_id"], amr=amr))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_grant"
    assert "requires a second factor" in response.json()["error_description"]


async def test_asx2_an_assertion_with_mfa_reaches_a_resource_that_requires_it(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], seeded: Starlette
) -> None:
    admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=True)
    amr = ["pwd", "otp", "mfa"]
    response = await exchange(http, ema_client, id_jag(ema_client["client_id"], amr=amr))
    assert response.status_code == 200, response.text
    keys = jwt.key_set(seeded.state.mcpauth.keys.jwks())
    claims = jwt.verify(response.json()["access_token"], keys, issuer=ISSUER, audience=RESOURCE)
    assert claims["amr"] == amr


async def test_asx2_the_server_setting_requires_mfa_in_every_assertion(
    make_settings: Callable[..., Settings], password_hash: str
) -> None:
    jwks = {"keys": [jwt.public_jwk(IDP_KEY.public_key(), kid="idp-1", alg="ES256")]}
    app = create_app(make_settings(trusted_idps={IDP: json.dumps(jwks)}, require_mfa=True))
    admin.add_resource(app.state.mcpauth, RESOURCE, scopes=["mcp:tools"], is_default=True)
    client = admin.add_client(app.state.mcpauth, name="Enterprise agent", grant_types=[GRANT])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        one = await exchange(http, client, id_jag(client["client_id"], amr=["pwd"]))
        two = await exchange(http, client, id_jag(client["client_id"], amr=["pwd", "mfa"]))
    assert one.status_code == 400
    assert one.json()["error"] == "invalid_grant"
    assert two.status_code == 200, two.text


async def test_asx2_an_id_jag_for_a_disabled_person_is_refused(
    http: httpx2.AsyncClient, ema_client: dict[str, Any], seeded: Starlette
) -> None:
    """An operator disabled the account the identity provider's subject maps to: no token is
    issued for it, and the assertion is not spent."""
    first = await exchange(http, ema_client, id_jag(ema_client["client_id"]))
    assert first.status_code == 200, first.text
    ctx = seeded.state.mcpauth
    (employee,) = [u for u in admin.list_users(ctx) if u["username"] not in ("alice", "bob")]
    admin.disable_user(ctx, str(employee["username"]))
    refused = await exchange(http, ema_client, id_jag(ema_client["client_id"]))
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert "disabled" in refused.json()["error_description"]
