"""DPoP at the token endpoint (RFC 9449, docs/security.md T30): a proof binds the access token
(``cnf.jkt``, ``token_type: DPoP``) on every grant; a public client's refresh token is bound to
its key and refused with another or none; each proof is single use; the metadata advertises the
asymmetric algorithms only; a table of hostile proofs is refused with ``invalid_dpop_proof``
before any grant is touched."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.dpop import make_proof
from mcpauth.server import admin

from ..conftest import ISSUER
from .test_token import claims_of, get_code, redeem, refresh

pytestmark = pytest.mark.anyio

TOKEN_URL = f"{ISSUER}/token"
KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ed25519.Ed25519PrivateKey.generate()


def proof(key: Any = KEY, alg: str = "ES256", **changes: Any) -> str:
    return make_proof(key, alg=alg, method="POST", url=TOKEN_URL, **changes)


def thumbprint(key: Any, alg: str = "ES256") -> str:
    return jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg=alg))


@pytest.fixture
def bot(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth, name="bot", grant_types=["client_credentials"], scopes=["mcp:tools"]
    )


async def machine_token(
    http: httpx2.AsyncClient, bot: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx2.Response:
    return await http.post(
        "/token",
        data={"grant_type": "client_credentials"},
        auth=(bot["client_id"], bot["client_secret"]),
        headers=headers or {},
    )


async def test_the_metadata_advertises_asymmetric_dpop_algorithms_only(
    http: httpx2.AsyncClient,
) -> None:
    document = (await http.get("/.well-known/oauth-authorization-server")).json()
    algs = document["dpop_signing_alg_values_supported"]
    assert "ES256" in algs
    assert not [a for a in algs if a == "none" or a.startswith("HS")]


async def test_a_proof_binds_a_machine_token_and_bearer_stays_bearer(
    http: httpx2.AsyncClient, bot: dict[str, Any], seeded: Starlette
) -> None:
    bound = await machine_token(http, bot, {"DPoP": proof()})
    assert bound.status_code == 200, bound.text
    assert bound.json()["token_type"] == "DPoP"
    assert claims_of(seeded, bound.json()["access_token"])["cnf"] == {"jkt": thumbprint(KEY)}
    plain = await machine_token(http, bot)
    assert plain.json()["token_type"] == "Bearer"
    assert "cnf" not in claims_of(seeded, plain.json()["access_token"])


async def test_a_proof_is_single_use(http: httpx2.AsyncClient, bot: dict[str, Any]) -> None:
    once = proof()
    assert (await machine_token(http, bot, {"DPoP": once})).status_code == 200
    again = await machine_token(http, bot, {"DPoP": once})
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_dpop_proof"
    assert "used before" in again.json()["error_description"]


async def test_a_public_clients_refresh_token_is_bound_to_its_key(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    data = {
        "grant_type": "authorization_code", "code": code, "code_verifier": verifier,
        "redirect_uri": "http://127.0.0.1:5555/callback", "client_id": cid,
    }  # fmt: skip
    first = await http.post("/token", data=data, headers={"DPoP": proof()})
    assert first.status_code == 200, first.text
    assert first.json()["token_type"] == "DPoP"
    refresh_token = first.json()["refresh_token"]
    body = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": cid}
    without = await http.post("/token", data=body)
    with_another_key = await http.post("/token", data=body, headers={"DPoP": proof(OTHER, "EdDSA")})
    for refused in (without, with_another_key):
        assert refused.status_code == 400
        assert refused.json()["error"] == "invalid_dpop_proof"
    # the refusals did not rotate it: the key's holder still refreshes, and stays bound
    rotated = await http.post("/token", data=body, headers={"DPoP": proof()})
    assert rotated.status_code == 200, rotated.text
    assert claims_of(seeded, rotated.json()["access_token"])["cnf"] == {"jkt": thumbprint(KEY)}
    unbound = await refresh(http, cid, rotated.json()["refresh_token"])
    assert unbound.json()["error"] == "invalid_dpop_proof"


async def test_a_confidential_clients_refresh_token_stays_with_its_credentials(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    app = admin.add_client(
        seeded.state.mcpauth,
        name="web app",
        redirect_uris=["http://127.0.0.1:5555/callback"],
        grant_types=["authorization_code", "refresh_token"],
    )
    cid, secret = app["client_id"], app["client_secret"]
    code, verifier = await get_code(http, cid)
    first = await http.post(
        "/token",
        data={"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
              "redirect_uri": "http://127.0.0.1:5555/callback"},
        auth=(cid, secret),
        headers={"DPoP": proof()},
    )  # fmt: skip
    assert first.json()["token_type"] == "DPoP"
    again = await http.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": first.json()["refresh_token"]},
        auth=(cid, secret),
    )
    assert again.status_code == 200
    assert again.json()["token_type"] == "Bearer"


def _signed(header: dict[str, Any], claims: dict[str, Any], key: Any = KEY) -> str:
    full = {
        "typ": "dpop+jwt",
        "jwk": json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key())),
    }
    full.update(header)
    return pyjwt.encode(
        claims, key, algorithm="ES256", headers={k: v for k, v in full.items() if v is not None}
    )


def _b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _unsigned() -> str:
    jwk = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key()))
    return f"{_b64({'typ': 'dpop+jwt', 'alg': 'none', 'jwk': jwk})}.{_b64(_claims())}."


def _hmac_with_the_public_key() -> str:
    jwk = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key()))
    signing_input = f"{_b64({'typ': 'dpop+jwt', 'alg': 'HS256', 'jwk': jwk})}.{_b64(_claims())}"
    mac = hmac.new(json.dumps(jwk).encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def _claims(**changes: Any) -> dict[str, Any]:
    claims = {
        "jti": f"j-{time.time_ns()}",
        "htm": "POST",
        "htu": TOKEN_URL,
        "iat": int(time.time()),
    }
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


PRIVATE_JWK = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY))
STRANGER = ec.generate_private_key(ec.SECP256R1())
HOSTILE: list[tuple[str, Callable[[], list[str]]]] = [
    ("two proofs", lambda: [proof(), proof()]),
    ("empty", lambda: [""]),
    ("not a JWT", lambda: ["a.b.c"]),
    ("typ JWT", lambda: [_signed({"typ": "JWT"}, _claims())]),
    ("alg none", lambda: [_unsigned()]),
    ("HS256 keyed with the public key", lambda: [_hmac_with_the_public_key()]),
    ("no jwk", lambda: [_signed({"jwk": None}, _claims())]),
    ("private jwk", lambda: [_signed({"jwk": PRIVATE_JWK}, _claims())]),
    ("symmetric jwk", lambda: [_signed({"jwk": {"kty": "oct", "k": "c2Vj"}}, _claims())]),
    ("signed by another key", lambda: [_signed({}, _claims(), STRANGER)]),
    ("no jti", lambda: [_signed({}, _claims(jti=None))]),
    ("short jti", lambda: [_signed({}, _claims(jti="x"))]),
    ("GET", lambda: [_signed({}, _claims(htm="GET"))]),
    ("the authorize URL", lambda: [_signed({}, _claims(htu=f"{ISSUER}/authorize"))]),
    ("another host", lambda: [_signed({}, _claims(htu="http://evil.example/token"))]),
    ("https instead", lambda: [_signed({}, _claims(htu="https://127.0.0.1:9000/token"))]),
    ("no iat", lambda: [_signed({}, _claims(iat=None))]),
    ("stale iat", lambda: [_signed({}, _claims(iat=int(time.time()) - 3600))]),
    ("future iat", lambda: [_signed({}, _claims(iat=int(time.time()) + 3600))]),
    ("iat as text", lambda: [_signed({}, _claims(iat="now"))]),
    ("oversized", lambda: ["e" * 9000]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "proofs"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_a_hostile_proof_is_refused_before_the_grant_is_used(
    http: httpx2.AsyncClient, bot: dict[str, Any], case: str, proofs: Callable[[], list[str]]
) -> None:
    headers = [("DPoP", value) for value in proofs()]
    response = await http.post(
        "/token",
        data={"grant_type": "client_credentials"},
        auth=(bot["client_id"], bot["client_secret"]),
        headers=headers,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_dpop_proof"


async def test_a_refused_proof_leaves_the_code_unused(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    bad = await http.post(
        "/token",
        data={"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
              "redirect_uri": "http://127.0.0.1:5555/callback", "client_id": cid},
        headers={"DPoP": _signed({}, _claims(htm="GET"))},
    )  # fmt: skip
    assert bad.json()["error"] == "invalid_dpop_proof"
    good = await redeem(http, cid, code, verifier)
    assert good.status_code == 200, good.text
