"""``openid`` answered as an OpenID Provider: the ID token of the code exchange, checked by a
real OpenID client library (joserfc for the signature against the keys fetched from the
discovery document's ``jwks_uri``, Authlib's ``CodeIDToken`` for iss, aud, nonce and
at_hash); UserInfo (OpenID Connect Core §5.3) with RFC 6750 errors; the discovery document
complete for OpenID Connect Discovery 1.0."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from authlib.oidc.core import CodeIDToken
from joserfc import jwt as jose_jwt
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.dpop import make_proof
from mcpauth.errors import InvalidToken
from mcpauth.server import admin, create_app
from mcpauth.server.config import Settings
from mcpauth.server.storage.lookups import user_by_name
from mcpauth.server.storage.models import UpstreamIdentity

from ..conftest import ISSUER
from ..oauth import (
    authorization_params,
    pkce_pair,
    query,
    register_public_client,
    sign_in_and_approve,
)
from .conftest import RESOURCE, add_user
from .test_token import REDIRECT, redeem

pytestmark = pytest.mark.anyio


async def code_tokens(
    http: httpx2.AsyncClient, client_id: str, scope: str, **extra: str
) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    params = authorization_params(
        client_id, challenge, redirect_uri=REDIRECT, resource=RESOURCE, scope=scope, **extra
    )
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303, response.text
    redeemed = await redeem(http, client_id, query(response.headers["location"])["code"], verifier)
    assert redeemed.status_code == 200, redeemed.text
    return dict(redeemed.json())


async def verified_id_token(
    http: httpx2.AsyncClient, body: dict[str, Any], client_id: str, nonce: str | None
) -> dict[str, Any]:
    """The ID token as an OpenID relying party checks it, with the keys it discovers."""
    meta = (await http.get("/.well-known/openid-configuration")).json()
    keys = KeySet.import_key_set((await http.get(meta["jwks_uri"])).json())
    registry = JWSRegistry(algorithms=meta["id_token_signing_alg_values_supported"])
    decoded = jose_jwt.decode(body["id_token"], keys, registry=registry)
    options: dict[str, Any] = {
        "iss": {"essential": True, "value": meta["issuer"]},
        "aud": {"essential": True, "value": client_id},
        "sub": {"essential": True},
        "exp": {"essential": True},
        "iat": {"essential": True},
    }
    if nonce is not None:
        options["nonce"] = {"essential": True, "value": nonce}
    claims = CodeIDToken(
        decoded.claims,
        decoded.header,
        options,
        {"nonce": nonce, "client_id": client_id, "access_token": body["access_token"]},
    )
    assert "at_hash" in decoded.claims
    claims.validate(now=int(time.time()))  # at_hash too, since the access token is given
    assert decoded.header["typ"] == "JWT"
    return dict(decoded.claims)


def give_alice_an_email(app: Starlette, *, verified: bool) -> None:
    ctx = app.state.mcpauth
    with ctx.db.write() as session:
        alice = user_by_name(session, "alice")
        assert alice is not None
        session.add(
            UpstreamIdentity(
                issuer="https://idp.example",
                subject="alice-at-idp",
                user_id=alice.id,
                provider_id="idp",
                email="alice@example.com",
                email_verified=verified,
                name="Alice Liddell",
                created_at=ctx.now(),
                last_login_at=ctx.now(),
            )
        )


@pytest.fixture
def make_seeded(
    make_settings: Callable[..., Settings], password_hash: str
) -> Callable[..., Starlette]:
    def make(**settings: Any) -> Starlette:
        app = create_app(make_settings(**settings))
        add_user(app, "alice", password_hash)
        admin.add_resource(
            app.state.mcpauth,
            RESOURCE,
            scopes=["mcp:tools=Use the tools"],
            default_scopes=["mcp:tools"],
            is_default=True,
        )
        return app

    return make


def http_for(app: Starlette) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    return httpx2.AsyncClient(transport=transport, base_url=ISSUER)


# joserfc warns that RFC 9864 deprecates the name EdDSA (for Ed25519); it is the name this
# server publishes its Ed25519 keys under
@pytest.mark.filterwarnings("ignore:EdDSA is deprecated:joserfc.errors.SecurityWarning")
@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
async def test_the_id_token_verifies_with_an_openid_library_and_the_published_keys(
    make_seeded: Callable[..., Starlette], alg: str
) -> None:
    app = make_seeded(signing_alg=alg)
    give_alice_an_email(app, verified=True)
    async with http_for(app) as http:
        client = await register_public_client(http, REDIRECT)
        body = await code_tokens(
            http, client["client_id"], "openid profile email mcp:tools", nonce="n-0S6_WzA2Mj"
        )
        claims = await verified_id_token(http, body, client["client_id"], "n-0S6_WzA2Mj")
    access = jwt.verify(
        body["access_token"],
        jwt.key_set(app.state.mcpauth.keys.jwks()),
        issuer=ISSUER,
        audience=RESOURCE,
    )
    assert claims["sub"] == access["sub"]
    assert claims["azp"] == client["client_id"]
    assert claims["auth_time"] <= claims["iat"]
    assert claims["email"] == "alice@example.com"
    assert claims["email_verified"] is True
    assert claims["name"] == "Alice Liddell"
    assert access["scope"] == "mcp:tools"  # the OpenID scopes stay out of the access token
    # an ID token never passes for an access token (typ JWT, aud the client)
    with pytest.raises(InvalidToken):
        jwt.verify(
            body["id_token"],
            jwt.key_set(app.state.mcpauth.keys.jwks()),
            issuer=ISSUER,
            audience=client["client_id"],
        )


async def test_userinfo_takes_a_dpop_bound_token_with_a_proof_of_its_key(
    make_seeded: Callable[..., Starlette],
) -> None:
    app = make_seeded()
    key = jwt.generate_private_key("ES256")
    async with http_for(app) as http:
        client = await register_public_client(http, REDIRECT)
        verifier, challenge = pkce_pair()
        params = authorization_params(
            client["client_id"], challenge, redirect_uri=REDIRECT, scope="openid"
        )
        response = await sign_in_and_approve(http, params)
        code = query(response.headers["location"])["code"]
        token_proof = make_proof(key, alg="ES256", method="POST", url=f"{ISSUER}/token")
        redeemed = await http.post(
            "/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "code_verifier": verifier,
                "client_id": client["client_id"],
            },
            headers={"DPoP": token_proof},
        )
        body = redeemed.json()
        assert body["token_type"] == "DPoP", redeemed.text
        as_bearer = await http.get("/userinfo", headers=bearer(body["access_token"]))
        assert as_bearer.status_code == 401
        url = f"{ISSUER}/userinfo"
        proof = make_proof(
            key, alg="ES256", method="GET", url=url, access_token=body["access_token"]
        )
        headers = {"Authorization": f"DPoP {body['access_token']}", "DPoP": proof}
        info = await http.get("/userinfo", headers=headers)
        assert info.status_code == 200, info.text
        replayed = await http.get("/userinfo", headers=headers)
        assert replayed.status_code == 401
        assert replayed.json()["error"] == "invalid_dpop_proof"


async def test_an_unverified_email_is_never_given_and_claims_follow_the_scopes(
    make_seeded: Callable[..., Starlette],
) -> None:
    app = make_seeded()
    give_alice_an_email(app, verified=False)
    async with http_for(app) as http:
        client = await register_public_client(http, REDIRECT)
        body = await code_tokens(http, client["client_id"], "openid email")
        claims = await verified_id_token(http, body, client["client_id"], None)
        assert "nonce" not in claims
        assert not {"email", "email_verified", "name"} & set(claims)
        info = await http.get("/userinfo", headers=bearer(body["access_token"]))
        assert info.json() == {"sub": claims["sub"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_userinfo_answers_get_and_post_for_a_token_issued_with_openid(
    make_seeded: Callable[..., Starlette],
) -> None:
    app = make_seeded()
    give_alice_an_email(app, verified=True)
    async with http_for(app) as http:
        client = await register_public_client(http, REDIRECT)
        body = await code_tokens(http, client["client_id"], "openid email")
        claims = await verified_id_token(http, body, client["client_id"], None)
        for method in ("GET", "POST"):
            info = await http.request(method, "/userinfo", headers=bearer(body["access_token"]))
            assert info.status_code == 200, info.text
            assert info.headers["cache-control"] == "no-store"
            assert info.json() == {
                "sub": claims["sub"],
                "email": "alice@example.com",
                "email_verified": True,
            }  # no name: profile was not granted


async def test_userinfo_without_a_token_is_a_bare_401_challenge(
    make_seeded: Callable[..., Starlette],
) -> None:
    async with http_for(make_seeded()) as http:
        response = await http.get("/userinfo")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "error=" not in response.headers["www-authenticate"]  # RFC 6750 §3.1


async def test_userinfo_refuses_a_garbage_or_revoked_token_as_invalid_token(
    make_seeded: Callable[..., Starlette],
) -> None:
    app = make_seeded()
    async with http_for(app) as http:
        garbage = await http.get("/userinfo", headers=bearer("not.a.token"))
        client = await register_public_client(http, REDIRECT)
        body = await code_tokens(http, client["client_id"], "openid")
        revoked = await http.post(
            "/revoke", data={"token": body["refresh_token"], "client_id": client["client_id"]}
        )
        assert revoked.status_code == 200
        after = await http.get("/userinfo", headers=bearer(body["access_token"]))
    for response in (garbage, after):
        assert response.status_code == 401
        assert response.json()["error"] == "invalid_token"
        assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_userinfo_refuses_a_token_without_openid_as_insufficient_scope(
    make_seeded: Callable[..., Starlette],
) -> None:
    app = make_seeded()
    async with http_for(app) as http:
        client = await register_public_client(http, REDIRECT)
        body = await code_tokens(http, client["client_id"], "mcp:tools")
        assert "id_token" not in body
        response = await http.get("/userinfo", headers=bearer(body["access_token"]))
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="openid"' in challenge


async def test_the_discovery_document_is_complete_for_openid_connect_discovery(
    make_seeded: Callable[..., Starlette],
) -> None:
    async with http_for(make_seeded()) as http:
        meta = (await http.get("/.well-known/openid-configuration")).json()
    # OpenID Connect Discovery 1.0 §3: the REQUIRED members
    for member in (
        "issuer",
        "authorization_endpoint",
        "token_endpoint",
        "jwks_uri",
        "response_types_supported",
        "subject_types_supported",
        "id_token_signing_alg_values_supported",
    ):
        assert meta[member], member
    assert meta["userinfo_endpoint"] == f"{ISSUER}/userinfo"
    assert meta["id_token_signing_alg_values_supported"] == ["ES256"]
    assert {"openid", "profile", "email"} <= set(meta["scopes_supported"])
    assert {"sub", "iss", "aud", "nonce", "email", "email_verified", "name"} <= set(
        meta["claims_supported"]
    )
    assert "code" in meta["response_types_supported"]
