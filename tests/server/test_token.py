"""The token endpoint: single-use codes bound to client, redirect URI, PKCE and resource;
rotating refresh tokens whose reuse past the grace kills the family; RFC 9068 access tokens; client
authentication (docs/security.md T1-T5, T13, T14, T18, T19, T23, T28; AS-05, AS-24, AS-25)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import admin

from ..conftest import ISSUER
from ..oauth import (
    authorization_params,
    pkce_pair,
    query,
    register_public_client,
    sign_in_and_approve,
)
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
REDIRECT = "http://127.0.0.1:5555/callback"


async def get_code(
    http: httpx2.AsyncClient,
    client_id: str,
    *,
    resource: str | None = RESOURCE,
    scope: str | None = None,
    redirect_uri: str = REDIRECT,
) -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    params = authorization_params(
        client_id, challenge, resource=resource, scope=scope, redirect_uri=redirect_uri
    )
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303, response.text
    return query(response.headers["location"])["code"], verifier


def code_form(cid: str, the_code: str, the_verifier: str, **changes: str | None) -> dict[str, str]:
    form = {
        "grant_type": "authorization_code",
        "code": the_code,
        "redirect_uri": REDIRECT,
        "code_verifier": the_verifier,
        "client_id": cid,
        "resource": RESOURCE,
    }
    for key, value in changes.items():
        if value is None:
            form.pop(key, None)
        else:
            form[key] = value
    return {k: v for k, v in form.items() if v is not None}


async def redeem(
    http: httpx2.AsyncClient, cid: str, the_code: str, the_verifier: str, **changes: str | None
) -> httpx2.Response:
    return await http.post("/token", data=code_form(cid, the_code, the_verifier, **changes))


async def refresh(
    http: httpx2.AsyncClient, client_id: str, token: str, **extra: str
) -> httpx2.Response:
    return await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": token,
            "client_id": client_id,
            **extra,
        },
    )


def claims_of(app: Starlette, access_token: str) -> dict[str, Any]:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return jwt.verify(access_token, keys, issuer=ISSUER, audience=RESOURCE)


async def tokens(http: httpx2.AsyncClient, client: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    code, verifier = await get_code(http, client["client_id"], **kwargs)
    response = await redeem(http, client["client_id"], code, verifier)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_code_exchange_returns_an_rfc9068_token_for_the_resource(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    code, verifier = await get_code(http, public_client["client_id"])
    response = await redeem(http, public_client["client_id"], code, verifier)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"  # T28
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 600
    assert body["scope"] == "mcp:tools"
    header = jwt.unverified_header(body["access_token"])
    assert header["typ"] == "at+jwt"
    claims = claims_of(seeded, body["access_token"])
    assert claims["aud"] == RESOURCE
    assert claims["client_id"] == public_client["client_id"]
    assert claims["scope"] == "mcp:tools"
    assert claims["exp"] - claims["iat"] == 600
    assert claims["sub"] != "alice"
    assert len(claims["sub"]) == 32  # opaque, never the username
    assert len(body["refresh_token"]) >= 43  # T18: 256 random bits


async def test_t1_a_replayed_code_is_refused_and_revokes_the_grant(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    first = await redeem(http, cid, code, verifier)
    assert first.status_code == 200
    second = await redeem(http, cid, code, verifier)
    assert second.status_code == 400
    assert second.json()["error"] == "invalid_grant"
    after = await refresh(http, cid, first.json()["refresh_token"])
    assert after.status_code == 400
    assert after.json()["error"] == "invalid_grant"


@pytest.mark.every_engine  # concurrency: row locks differ between the engines
async def test_t1_concurrent_redemptions_have_exactly_one_winner(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    responses = await asyncio.gather(*(redeem(http, cid, code, verifier) for _ in range(10)))
    assert sorted(r.status_code for r in responses) == [200] + [400] * 9


async def test_t2_a_code_is_bound_to_its_client(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    other = await register_public_client(http)
    code, verifier = await get_code(http, public_client["client_id"])
    stolen = await redeem(http, other["client_id"], code, verifier)
    assert stolen.status_code == 400
    assert stolen.json()["error"] == "invalid_grant"


async def test_t3_an_expired_code_is_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as frozen:
        code, verifier = await get_code(http, cid)
        frozen.tick(61)
        response = await redeem(http, cid, code, verifier)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"code_verifier": None}, "invalid_request"),
        ({"code_verifier": "x" * 42}, "invalid_request"),
        ({"code_verifier": "a" * 43}, "invalid_grant"),
        ({"redirect_uri": None}, "invalid_request"),
        ({"redirect_uri": "http://127.0.0.1:5556/callback"}, "invalid_grant"),
        ({"resource": "http://127.0.0.1:8001/mcp"}, "invalid_target"),
        ({"resource": "not a uri"}, "invalid_target"),
        ({"code": "forged"}, "invalid_grant"),
        ({"code": None}, "invalid_request"),
    ],
)
async def test_t4_5_14_code_bindings_are_checked(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
    changes: dict[str, str | None],
    error: str,
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    response = await redeem(http, cid, code, verifier, **changes)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    if "code" not in changes:  # a code presented wrongly once is burnt
        assert (await redeem(http, cid, code, verifier)).status_code == 400


async def test_resource_may_be_omitted_at_the_token_endpoint(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    response = await redeem(http, cid, code, verifier, resource=None)
    assert response.status_code == 200
    assert claims_of(seeded, response.json()["access_token"])["aud"] == RESOURCE


async def test_t13_refresh_rotates_and_reuse_after_the_grace_kills_the_family(
    http: httpx2.AsyncClient, public_client: dict[str, Any], settings: Any
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as clock:
        first = await tokens(http, public_client)
        rotated = await refresh(http, cid, first["refresh_token"])
        assert rotated.status_code == 200
        assert rotated.headers["cache-control"] == "no-store"
        new = rotated.json()["refresh_token"]
        assert new != first["refresh_token"]
        clock.tick(settings.refresh_token_reuse_grace)  # OAuth 2.1 §4.3.1: now it is reuse
        replay = await refresh(http, cid, first["refresh_token"])
        assert replay.json()["error"] == "invalid_grant"
        killed = await refresh(http, cid, new)
        assert killed.status_code == 400
        assert killed.json()["error"] == "invalid_grant"


@pytest.mark.every_engine  # concurrency: row locks differ between the engines
async def test_t13_concurrent_refreshes_all_win_within_the_grace_and_die_with_their_family(
    http: httpx2.AsyncClient, public_client: dict[str, Any], settings: Any
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as clock:
        first = await tokens(http, public_client)
        responses = await asyncio.gather(
            *(refresh(http, cid, first["refresh_token"]) for _ in range(10))
        )
        assert [r.status_code for r in responses] == [200] * 10
        issued = {r.json()["refresh_token"] for r in responses}
        assert len(issued) == 10
        clock.tick(settings.refresh_token_reuse_grace)
        assert (await refresh(http, cid, first["refresh_token"])).status_code == 400
        for token in issued:  # one family: the reuse past the grace revoked every member
            assert (await refresh(http, cid, token)).json()["error"] == "invalid_grant"


async def test_t13_scope_may_narrow_but_never_widen(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    # a scope of the resource the grant does not hold widens it (another resource's scope,
    # the old example here, is now narrowed away as at the authorization endpoint)
    first = await tokens(http, public_client, scope="mcp:tools")
    wider = await refresh(http, cid, first["refresh_token"], scope="mcp:tools mcp:admin")
    assert wider.json()["error"] == "invalid_scope"
    first = await tokens(http, public_client, scope="mcp:tools mcp:admin")
    narrow = await refresh(http, cid, first["refresh_token"], scope="mcp:tools")
    assert narrow.status_code == 200
    assert claims_of(seeded, narrow.json()["access_token"])["scope"] == "mcp:tools"
    again = await refresh(http, cid, narrow.json()["refresh_token"])
    assert again.json()["scope"] == "mcp:tools mcp:admin"  # the refresh token kept the grant


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"scope": "mcp:tools mcp:admin other:read"}, "invalid_scope"),
        ({"scope": 'mcp:tools "quoted"'}, "invalid_scope"),
        ({"resource": "http://127.0.0.1:8001/mcp"}, "invalid_target"),
        ({"resource": "http://[::1/mcp"}, "invalid_target"),
    ],
)
async def test_a_refused_refresh_keeps_the_refresh_token_usable(
    http: httpx2.AsyncClient, public_client: dict[str, Any], extra: dict[str, str], error: str
) -> None:
    cid = public_client["client_id"]
    first = await tokens(http, public_client, scope="mcp:tools")
    refused = await refresh(http, cid, first["refresh_token"], **extra)
    assert refused.status_code == 400
    assert refused.json()["error"] == error
    # OAuth 2.1 §4.3.1: only a successful refresh rotates; the retry is not reuse
    retry = await refresh(http, cid, first["refresh_token"])
    assert retry.status_code == 200, retry.text
    assert retry.json()["scope"] == "mcp:tools"


async def test_t13_another_clients_refresh_token_is_invalid_grant(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    other = await register_public_client(http)
    first = await tokens(http, public_client)
    response = await refresh(http, other["client_id"], first["refresh_token"])
    assert response.json()["error"] == "invalid_grant"


async def test_t14_refresh_for_another_resource_is_invalid_target(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    first = await tokens(http, public_client)
    response = await refresh(
        http,
        public_client["client_id"],
        first["refresh_token"],
        resource="http://127.0.0.1:8001/mcp",
    )
    assert response.json()["error"] == "invalid_target"


async def test_refresh_tokens_expire_when_idle(
    http: httpx2.AsyncClient, public_client: dict[str, Any], settings: Any
) -> None:
    with freeze_time() as frozen:
        first = await tokens(http, public_client)
        frozen.tick(settings.refresh_token_idle_ttl + 1)
        response = await refresh(http, public_client["client_id"], first["refresh_token"])
    assert response.json()["error"] == "invalid_grant"


async def test_no_refresh_token_for_clients_that_did_not_ask_for_one(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = await register_public_client(http, grant_types=["authorization_code"])
    body = await tokens(http, client)
    assert "refresh_token" not in body


@pytest.mark.parametrize(
    ("form", "error"),
    [
        (
            {"grant_type": "password", "username": "alice", "password": "x"},
            "unsupported_grant_type",
        ),
        ({"grant_type": "implicit"}, "unsupported_grant_type"),
        ({"grant_type": "urn:ietf:params:oauth:grant-type:saml2-bearer"}, "unsupported_grant_type"),
        # a grant this server has, that the client did not register for (RFC 8628 §3.4)
        ({"grant_type": "urn:ietf:params:oauth:grant-type:device_code"}, "unauthorized_client"),
        ({}, "invalid_request"),
    ],
)
async def test_t23_unsupported_grants_are_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any], form: dict[str, str], error: str
) -> None:
    response = await http.post("/token", data={"client_id": public_client["client_id"], **form})
    assert response.status_code == 400
    assert response.json()["error"] == error


async def test_token_requests_must_be_form_encoded(http: httpx2.AsyncClient) -> None:
    response = await http.post("/token", json={"grant_type": "authorization_code"})
    assert response.status_code == 415
    assert response.json()["error"] == "invalid_request"


async def test_t27_a_repeated_token_parameter_is_invalid_request(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    body = (
        "grant_type=refresh_token&refresh_token=a&refresh_token=b&client_id="
        + public_client["client_id"]
    )
    response = await http.post(
        "/token", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert response.json()["error"] == "invalid_request"


@pytest.fixture
def confidential(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth,
        name="Web app",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        auth_method="client_secret_basic",
    )


def basic(client_id: str, secret: str) -> dict[str, str]:
    token = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def test_confidential_client_authenticates_with_basic(
    http: httpx2.AsyncClient, confidential: dict[str, Any]
) -> None:
    cid = confidential["client_id"]
    code, verifier = await get_code(http, cid)
    form = code_form(cid, code, verifier, client_id=None)
    response = await http.post(
        "/token", data=form, headers=basic(cid, confidential["client_secret"])
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "how", ["wrong-secret", "no-secret", "unknown-client", "wrong-secret-in-body"]
)
async def test_failed_client_authentication_is_401_invalid_client_with_a_challenge(
    http: httpx2.AsyncClient, confidential: dict[str, Any], how: str
) -> None:
    cid, secret = confidential["client_id"], confidential["client_secret"]
    form = {"grant_type": "refresh_token", "refresh_token": "x"}
    headers: dict[str, str] = {}
    if how == "wrong-secret":
        headers = basic(cid, secret + "x")
    elif how == "no-secret":
        form["client_id"] = cid
    elif how == "unknown-client":
        headers = basic("nobody", secret)
    else:  # was post-instead-of-basic: the body may carry the secret, the right one only
        form.update(client_id=cid, client_secret=secret + "x")
    response = await http.post("/token", data=form, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    assert response.headers["www-authenticate"].startswith("Basic")


async def test_two_authentication_methods_at_once_are_invalid_request(
    http: httpx2.AsyncClient, confidential: dict[str, Any]
) -> None:
    cid, secret = confidential["client_id"], confidential["client_secret"]
    form = {"grant_type": "refresh_token", "refresh_token": "x", "client_secret": secret}
    response = await http.post("/token", data=form, headers=basic(cid, secret))
    assert response.json()["error"] == "invalid_request"


async def test_t19_repeated_bad_secrets_are_throttled_with_retry_after(
    http: httpx2.AsyncClient, confidential: dict[str, Any]
) -> None:
    cid, secret = confidential["client_id"], confidential["client_secret"]
    form = {"grant_type": "refresh_token", "refresh_token": "x"}
    statuses = [
        (await http.post("/token", data=form, headers=basic(cid, f"guess-{i}"))).status_code
        for i in range(21)
    ]
    assert statuses[:20] == [401] * 20
    locked = await http.post("/token", data=form, headers=basic(cid, secret))
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0
