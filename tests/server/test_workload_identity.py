"""Workload identity federation (docs/security.md T39): the jwt-bearer grant with a platform's
token (shaped like a Kubernetes service-account token) gets an access token for the client a
rule names, with no client secret; each way a token can be wrong for this server is refused
with ``invalid_grant`` and nothing else is issued."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcpauth import jwt
from mcpauth.dpop import make_proof
from mcpauth.oauth import JWT_BEARER
from mcpauth.server import admin
from mcpauth.server.app import create_app
from mcpauth.server.config import Settings

from ..conftest import ISSUER
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio

PLATFORM = "https://kubernetes.default.svc.cluster.local"
SUBJECT = "system:serviceaccount:ci:builder"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**json.loads(pyjwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1"}


def platform_token(key: Any = KEY, headers: dict[str, Any] | None = None, **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": PLATFORM, "sub": SUBJECT, "aud": [ISSUER], "iat": now, "exp": now + 600}
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    return pyjwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1", **(headers or {})})


class Workloads:
    """An app whose rules let the platform's ``ci`` builder act as one registered client and
    its ``deploy`` namespace as another (the rules name the ids registration gave them)."""

    def __init__(self, make_settings: Callable[..., Settings]) -> None:
        first = create_app(make_settings())
        ctx = first.state.mcpauth
        admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools", "mcp:admin"], is_default=True)
        admin.add_resource(ctx, "http://127.0.0.1:8001/mcp", scopes=["other:read"])
        self.builder, self.deployer, self.plain = (
            admin.add_client(
                ctx,
                name=name,
                grant_types=grants,
                auth_method="none",
                scopes=["mcp:tools"],
                redirect_uris=redirects,
            )["client_id"]
            for name, grants, redirects in (
                ("ci builder", [JWT_BEARER], []),
                ("deployer", [JWT_BEARER], []),
                ("no workload grant", ["authorization_code"], ["http://127.0.0.1/cb"]),
            )
        )
        keys = json.dumps({"keys": [JWK]})
        rules = [
            {"issuer": PLATFORM, "jwks": keys, "subject": SUBJECT, "client_id": self.builder},
            {"issuer": PLATFORM, "jwks": keys, "subject": "system:serviceaccount:deploy:*",
             "client_id": self.deployer},
            {"issuer": PLATFORM, "jwks": keys, "subject": "system:serviceaccount:x:y",
             "client_id": self.plain},
        ]  # fmt: skip
        self.app = create_app(make_settings(workloads=rules))

    async def token(self, headers: dict[str, str] | None = None, **form: str) -> httpx2.Response:
        transport = httpx2.ASGITransport(app=self.app)
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            return await http.post(
                "/token", data={"grant_type": JWT_BEARER, **form}, headers=headers or {}
            )

    def claims(self, access_token: str) -> dict[str, Any]:
        keys = jwt.key_set(self.app.state.mcpauth.keys.jwks())
        return jwt.verify(access_token, keys, issuer=ISSUER, audience=None)


@pytest.fixture
def workloads(make_settings: Callable[..., Settings]) -> Workloads:
    return Workloads(make_settings)


async def test_a_platform_token_gets_a_token_for_the_client_its_rule_names(
    workloads: Workloads,
) -> None:
    for form in ({}, {"client_id": workloads.builder}):  # the client may go unnamed
        response = await workloads.token(assertion=platform_token(), **form)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["token_type"] == "Bearer"
        assert "refresh_token" not in body
        claims = workloads.claims(body["access_token"])
        assert claims["sub"] == claims["client_id"] == workloads.builder
        assert claims["aud"] == RESOURCE
        assert claims["gty"] == "workload"
        assert body["scope"] == "mcp:tools"


async def test_the_token_endpoint_is_an_audience_and_the_grant_is_advertised(
    workloads: Workloads,
) -> None:
    response = await workloads.token(assertion=platform_token(aud=f"{ISSUER}/token"))
    assert response.status_code == 200, response.text
    transport = httpx2.ASGITransport(app=workloads.app)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        metadata = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert JWT_BEARER in metadata["grant_types_supported"]


async def test_the_token_is_reusable_during_its_life_like_a_service_account_token(
    workloads: Workloads,
) -> None:
    same = platform_token()
    for _ in range(2):
        assert (await workloads.token(assertion=same)).status_code == 200


async def test_a_prefix_rule_matches_a_namespace_and_dpop_binds_the_token(
    workloads: Workloads,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    proof = make_proof(key, alg="ES256", method="POST", url=f"{ISSUER}/token")
    response = await workloads.token(
        {"DPoP": proof}, assertion=platform_token(sub="system:serviceaccount:deploy:argo")
    )
    assert response.status_code == 200, response.text
    assert response.json()["token_type"] == "DPoP"
    assert workloads.claims(response.json()["access_token"])["sub"] == workloads.deployer


BAD: list[tuple[str, Callable[[], str], str]] = [
    ("another audience", lambda: platform_token(aud="https://other.example"), "aud"),
    ("expired", lambda: platform_token(exp=int(time.time()) - 120), "expired"),
    ("no exp", lambda: platform_token(exp=None), "exp"),
    ("no sub", lambda: platform_token(sub=None), "malformed"),
    ("signed by another key", lambda: platform_token(STRANGER), "invalid"),
    ("an unknown kid", lambda: platform_token(headers={"kid": "k9"}), "unknown key"),
    ("an access token", lambda: platform_token(headers={"typ": "at+jwt"}), "not a workload"),
    ("a subject no rule names", lambda: platform_token(sub="system:serviceaccount:ci:other"),
     "No workload rule"),
    ("a prefix look-alike", lambda: platform_token(sub="system:serviceaccount:deployer:x"),
     "No workload rule"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "said"), BAD, ids=[b[0] for b in BAD])
async def test_a_token_that_is_wrong_for_this_server_is_refused(
    workloads: Workloads, case: str, make: Callable[[], str], said: str
) -> None:
    response = await workloads.token(assertion=make(), client_id=workloads.builder)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_grant"
    assert said.lower() in response.json()["error_description"].lower()


async def test_a_token_acts_only_as_the_client_its_rule_names(workloads: Workloads) -> None:
    as_other = await workloads.token(assertion=platform_token(), client_id=workloads.deployer)
    assert as_other.json()["error"] == "invalid_grant"
    not_allowed = await workloads.token(
        assertion=platform_token(sub="system:serviceaccount:x:y"), client_id=workloads.plain
    )
    assert not_allowed.json()["error"] == "unauthorized_client"


async def test_an_issuer_that_is_not_configured_is_not_a_workload(workloads: Workloads) -> None:
    response = await workloads.token(
        assertion=platform_token(iss="https://evil.example"), client_id=workloads.builder
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


async def test_wider_scopes_are_refused_and_offline_access_narrowed_away(
    workloads: Workloads,
) -> None:
    wider = await workloads.token(assertion=platform_token(), scope="mcp:admin")
    assert wider.json()["error"] == "invalid_scope"
    # (invalid_scope before: offline_access is dropped; a workload's token has no refresh token)
    offline = await workloads.token(assertion=platform_token(), scope="offline_access")
    assert offline.status_code == 200, offline.text
    assert offline.json()["scope"] == "mcp:tools"
    assert "refresh_token" not in offline.json()
