"""DPoP at the protected resource (RFC 9449 §7, docs/security.md T30): a bound token works only
with the DPoP scheme and a proof of its key for this request; a table of hostile proofs and
misused schemes is each refused with 401, its exact error and a DPoP challenge; nonces; the
single-use record; required DPoP; and the proof and token never reach the application."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from mcpauth import jwt
from mcpauth.dpop import MemoryReplayCache, ReplayCacheFull, access_token_hash, make_proof
from mcpauth.middleware import DPoP

from .helpers import RESOURCE, FakeAuthorizationServer, RecordingApp, client_for, rpc

pytestmark = pytest.mark.anyio

KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ed25519.Ed25519PrivateKey.generate()
URL = RESOURCE  # https://mcp.example.com/mcp
ALGS = 'algs="ES256 EdDSA RS256 PS256"'


def thumbprint(key: Any, alg: str = "ES256") -> str:
    return jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg=alg))


def bound_token(auth_server: FakeAuthorizationServer, key: Any = KEY) -> str:
    return auth_server.mint(cnf={"jkt": thumbprint(key)})


def proof(token: str, key: Any = KEY, alg: str = "ES256", **changes: Any) -> str:
    changes.setdefault("method", "POST")
    changes.setdefault("url", URL)
    return make_proof(key, alg=alg, access_token=token, **changes)


def dpop_headers(token: str, *proofs: str) -> list[tuple[str, str]]:
    return [("Authorization", f"DPoP {token}"), *(("DPoP", p) for p in proofs)]


async def send(client: httpx.AsyncClient, token: str, *proofs: str) -> httpx.Response:
    """A JSON-RPC ping with ``Authorization: DPoP`` and the proofs given."""
    return await client.post("/mcp", json=rpc("ping"), headers=dpop_headers(token, *proofs))


def _b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _public_jwk() -> dict[str, Any]:
    return dict(json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key())))


def _claims(token: str, **changes: Any) -> dict[str, Any]:
    claims = {
        "jti": f"j-{time.time_ns()}",
        "htm": "POST",
        "htu": URL,
        "iat": int(time.time()),
        "ath": access_token_hash(token),
    }
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def _signed(token: str, header: dict[str, Any] | None = None, key: Any = KEY, **claims: Any) -> str:
    full = {"typ": "dpop+jwt", "jwk": _public_jwk(), **(header or {})}
    return pyjwt.encode(
        _claims(token, **claims),
        key,
        algorithm="ES256",
        headers={k: v for k, v in full.items() if v is not None},
    )


def _unsigned(token: str) -> str:
    header = {"typ": "dpop+jwt", "alg": "none", "jwk": _public_jwk()}
    return f"{_b64(header)}.{_b64(_claims(token))}."


def _hmac(token: str) -> str:
    header = {"typ": "dpop+jwt", "alg": "HS256", "jwk": _public_jwk()}
    signing_input = f"{_b64(header)}.{_b64(_claims(token))}"
    mac = hmac.new(b"public-key-as-secret", signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def _tampered(token: str) -> str:
    head, _, signature = _signed(token).split(".")
    return f"{head}.{_b64(_claims(token, htm='GET'))}.{signature}"


STRANGER = ec.generate_private_key(ec.SECP256R1())
PRIVATE_JWK = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY))
Hostile = Callable[[str], list[str]]
# (case, the proofs sent with a bound token, the error)
HOSTILE: list[tuple[str, Hostile, str]] = [
    ("no proof", lambda t: [], "invalid_dpop_proof"),
    ("two proofs", lambda t: [proof(t), proof(t)], "invalid_dpop_proof"),
    ("not a JWT", lambda t: ["a.b.c"], "invalid_dpop_proof"),
    ("typ JWT", lambda t: [_signed(t, {"typ": "JWT"})], "invalid_dpop_proof"),
    ("alg none", lambda t: [_unsigned(t)], "invalid_dpop_proof"),
    ("HS256", lambda t: [_hmac(t)], "invalid_dpop_proof"),
    ("no jwk", lambda t: [_signed(t, {"jwk": None})], "invalid_dpop_proof"),
    ("private key in jwk", lambda t: [_signed(t, {"jwk": PRIVATE_JWK})], "invalid_dpop_proof"),
    ("symmetric jwk", lambda t: [_signed(t, {"jwk": {"kty": "oct", "k": "c2Vj"}})],
     "invalid_dpop_proof"),
    ("another key's signature", lambda t: [_signed(t, key=STRANGER)], "invalid_dpop_proof"),
    ("tampered payload", lambda t: [_tampered(t)], "invalid_dpop_proof"),
    ("missing jti", lambda t: [_signed(t, jti=None)], "invalid_dpop_proof"),
    ("GET for a POST", lambda t: [_signed(t, htm="GET")], "invalid_dpop_proof"),
    ("another path", lambda t: [_signed(t, htu="https://mcp.example.com/other")],
     "invalid_dpop_proof"),
    ("another host", lambda t: [_signed(t, htu="https://evil.example/mcp")],
     "invalid_dpop_proof"),
    ("http instead of https", lambda t: [_signed(t, htu="http://mcp.example.com/mcp")],
     "invalid_dpop_proof"),
    ("stale iat", lambda t: [_signed(t, iat=int(time.time()) - 3600)], "invalid_dpop_proof"),
    ("future iat", lambda t: [_signed(t, iat=int(time.time()) + 3600)], "invalid_dpop_proof"),
    ("missing ath", lambda t: [_signed(t, ath=None)], "invalid_dpop_proof"),
    ("ath of another token", lambda t: [_signed(t, ath=access_token_hash("other"))],
     "invalid_dpop_proof"),
    ("a proof of another key", lambda t: [proof(t, OTHER, "EdDSA")], "invalid_dpop_proof"),
    ("oversized", lambda t: ["e" * 9000], "invalid_dpop_proof"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "error"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_a_hostile_proof_is_refused_with_a_dpop_challenge(
    protect: Any,
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    case: str,
    make: Hostile,
    error: str,
) -> None:
    token = bound_token(auth_server)
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, *make(token))
        )
    assert response.status_code == 401, response.text
    assert response.json()["error"] == error
    challenges = response.headers.get_list("www-authenticate")
    dpop_challenge = next(c for c in challenges if c.startswith("DPoP "))
    assert f'error="{error}"' in dpop_challenge
    assert ALGS in dpop_challenge
    assert "resource_metadata=" in dpop_challenge
    assert recording_app.calls == []


async def test_a_proof_of_the_bound_key_lets_the_request_through_and_is_single_use(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    token = bound_token(auth_server)
    once = proof(token)
    async with client_for(protect()) as client:
        first = await send(client, token, once)
        again = await send(client, token, once)
        fresh = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token))
        )
    assert first.status_code == 200, first.text
    assert again.status_code == 401
    assert "used before" in again.json()["error_description"]
    assert fresh.status_code == 200
    # neither the token nor the proof reached the application
    assert len(recording_app.calls) == 2
    for call in recording_app.calls:
        names = {name.lower() for name in call["headers"]}
        assert "authorization" not in names
        assert "dpop" not in names


async def test_a_proofs_query_and_fragment_are_ignored(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    token = bound_token(auth_server)
    with_query = proof(token, url=f"{URL}?x=1#frag")
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp?x=2", json=rpc("ping"), headers=dpop_headers(token, with_query)
        )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("scheme", "bound", "required", "said"),
    [
        ("Bearer", True, False, "DPoP-bound: send it with the DPoP scheme"),
        ("DPoP", False, False, "not DPoP-bound"),
        ("Bearer", False, True, "DPoP-bound tokens only"),
    ],
    ids=["bound token as Bearer", "unbound token as DPoP", "Bearer when DPoP is required"],
)
async def test_the_wrong_scheme_for_a_token_is_refused(
    protect: Any,
    auth_server: FakeAuthorizationServer,
    scheme: str,
    bound: bool,
    required: bool,
    said: str,
) -> None:
    token = bound_token(auth_server) if bound else auth_server.mint()
    headers = [("Authorization", f"{scheme} {token}"), ("DPoP", proof(token))]
    async with client_for(protect(dpop=DPoP(required=required))) as client:
        response = await client.post("/mcp", json=rpc("ping"), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_token"
    assert said in response.json()["error_description"]
    challenges = response.headers.get_list("www-authenticate")
    assert 'error="invalid_token"' in challenges[-1]
    assert challenges[-1].startswith("DPoP ")
    assert all(not c.startswith("Bearer ") for c in challenges) == required


async def test_nonces_are_required_when_configured(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    token = bound_token(auth_server)
    policy = DPoP(nonce_key=b"0123456789abcdef-shared-by-replicas")
    async with client_for(protect(dpop=policy)) as client:
        refused = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token))
        )
        assert refused.status_code == 401
        assert refused.json()["error"] == "use_dpop_nonce"
        nonce = refused.headers["DPoP-Nonce"]
        assert 'error="use_dpop_nonce"' in refused.headers.get_list("www-authenticate")[-1]
        accepted = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token, nonce=nonce))
        )
        assert accepted.status_code == 200, accepted.text
    # another replica with the same key accepts the same nonce
    async with client_for(protect(dpop=DPoP(nonce_key=policy.nonce_key))) as other:
        elsewhere = await other.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token, nonce=nonce))
        )
    assert elsewhere.status_code == 200


async def test_replicas_sharing_a_replay_record_refuse_a_proof_the_other_took(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    shared = MemoryReplayCache()
    token = bound_token(auth_server)
    once = proof(token)
    async with client_for(protect(dpop=DPoP(replay=shared))) as first:
        assert (await send(first, token, once)).status_code == 200
    async with client_for(protect(dpop=DPoP(replay=shared))) as second:
        replayed = await send(second, token, once)
    assert replayed.status_code == 401


async def test_the_replay_record_is_bounded_and_refuses_rather_than_forgets() -> None:
    record = MemoryReplayCache(max_entries=2)
    later = time.time() + 60
    assert await record.first_use("a", later)
    assert await record.first_use("b", later)
    with pytest.raises(ReplayCacheFull):
        await record.first_use("c", later)
    assert not await record.first_use("a", later)  # still remembered
    past = MemoryReplayCache(max_entries=2)
    assert await past.first_use("a", time.time() - 1)
    assert await past.first_use("b", time.time() - 1)
    assert await past.first_use("c", later)  # expired entries make room
    assert len(past) == 1


async def test_a_full_replay_record_gives_503_not_a_pass(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    token = bound_token(auth_server)
    async with client_for(protect(dpop=DPoP(replay=MemoryReplayCache(max_entries=1)))) as client:
        ok = await send(client, token, proof(token))
        full = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token))
        )
    assert ok.status_code == 200
    assert full.status_code == 503
    assert full.headers["Retry-After"]


async def test_bearer_tokens_keep_working_and_the_challenge_offers_both(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    async with client_for(protect()) as client:
        plain = await client.post(
            "/mcp", json=rpc("ping"), headers={"Authorization": f"Bearer {auth_server.mint()}"}
        )
        anonymous = await client.post("/mcp", json=rpc("ping"))
    assert plain.status_code == 200
    schemes = [c.split(" ", 1)[0] for c in anonymous.headers.get_list("www-authenticate")]
    assert schemes == ["Bearer", "DPoP"]


def test_the_replay_option_must_be_a_replay_cache() -> None:
    with pytest.raises(TypeError, match="first_use"):
        DPoP(replay=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="16 bytes"):
        DPoP(nonce_key=b"short")
