"""DPoP at the protected resource (RFC 9449 §7, docs/security.md T30): a bound token works only
with the DPoP scheme and a proof of its key for this request. A table of hostile proofs, misused
schemes and missing or stale nonces (what the conformance suite's resource-server checks will
send), each refused with its exact status, body and challenges; 403 with DPoP; the URI compared
as the client sent it; nonces handed out with accepted requests; the bounded single-use record
and the documented shared one; required DPoP; and the proof and token never reach the app."""

from __future__ import annotations

import base64
import gc
import hashlib
import hmac
import json
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from freezegun import freeze_time

from mcpauth import jwt
from mcpauth.dpop import (
    CLOCK_SKEW,
    MAX_AGE,
    NONCE_WINDOW_SECONDS,
    DPoPNonces,
    MemoryReplayCache,
    ReplayCacheFull,
    access_token_hash,
    make_proof,
)
from mcpauth.middleware import DPoP, ScopePolicy
from mcpauth.middleware.sender_constraint import request_path

from .helpers import RESOURCE, FakeAuthorizationServer, RecordingApp, bearer, client_for, rpc

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


async def send(client: httpx2.AsyncClient, token: str, *proofs: str) -> httpx2.Response:
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


def _listed(make: Callable[[str], str]) -> Callable[[str], list[str]]:
    return lambda token: [make(token)]


def _tampered(token: str) -> str:
    head, _, signature = _signed(token).split(".")
    return f"{head}.{_b64(_claims(token, htm='GET'))}.{signature}"


STRANGER = ec.generate_private_key(ec.SECP256R1())
PRIVATE_JWK = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY))
WEAK_RSA = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505
NONCE_KEY = b"0123456789abcdef-shared-by-replicas"
PRM = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


def _weak_rsa(token: str) -> str:
    jwk = json.loads(pyjwt.algorithms.RSAAlgorithm.to_jwk(WEAK_RSA.public_key()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyJWT warns when signing with such a key
        return pyjwt.encode(
            _claims(token), WEAK_RSA, algorithm="RS256", headers={"typ": "dpop+jwt", "jwk": jwk}
        )


def _okp_jwk_for_es256(token: str) -> str:
    okp = json.loads(pyjwt.algorithms.OKPAlgorithm.to_jwk(OTHER.public_key()))
    return _signed(token, {"jwk": okp})


Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class Refusal:
    """One request the middleware must refuse: ``send(bound, unbound)`` builds its headers from
    a token bound to KEY and an unbound one; ``error`` and ``description`` are exact."""

    name: str
    send: Callable[[str, str], Headers]
    error: str
    description: str
    status: int = 401
    policy: dict[str, Any] = field(default_factory=dict)
    twice: bool = False  # the same request is sent (and accepted) once before


def _dpop(make: Callable[[str], list[str]]) -> Callable[[str, str], Headers]:
    """``Authorization: DPoP <bound token>`` with the proofs ``make`` gives for it."""
    return lambda bound, unbound: dpop_headers(bound, *make(bound))


def _proof_refusal(name: str, make: Callable[[str], list[str]], description: str) -> Refusal:
    return Refusal(name, _dpop(make), "invalid_dpop_proof", description)


WINDOW = "The DPoP proof's iat is outside the accepted window"
NOT_THE_URI = "The DPoP proof's htu is not this request's URI"
ALG = "The DPoP proof's alg must be one of ES256, EdDSA, RS256, PS256"
NONCE = "This resource requires a DPoP nonce: use the one in the DPoP-Nonce header"
NEEDS_NONCE = {"nonce_key": NONCE_KEY}


def _with_nonce(nonce: str | None) -> Callable[[str, str], Headers]:
    return lambda bound, unbound: dpop_headers(bound, proof(bound, nonce=nonce))


REFUSALS: list[Refusal] = [
    _proof_refusal("no proof", lambda t: [], "A DPoP proof is required with the DPoP scheme"),
    _proof_refusal("two DPoP headers", lambda t: [proof(t), proof(t)],
                   "Exactly one DPoP header is required"),
    _proof_refusal("empty proof", lambda t: [""], "The DPoP proof is empty or too long"),
    _proof_refusal("proof over 8 KiB", lambda t: ["e" * 9000],
                   "The DPoP proof is empty or too long"),
    _proof_refusal("not a JWT", lambda t: ["a.b.c"], "The DPoP proof is not a JWT"),
    _proof_refusal("typ JWT", lambda t: [_signed(t, {"typ": "JWT"})],
                   "The DPoP proof's typ must be dpop+jwt"),
    _proof_refusal("no typ", lambda t: [_signed(t, {"typ": None})],
                   "The DPoP proof's typ must be dpop+jwt"),
    _proof_refusal("alg none", lambda t: [_unsigned(t)], ALG),
    _proof_refusal("HS256 keyed with the public key", lambda t: [_hmac(t)], ALG),
    _proof_refusal("no jwk", lambda t: [_signed(t, {"jwk": None})],
                   "The DPoP proof's header must carry its public key as jwk"),
    _proof_refusal("private key in jwk", lambda t: [_signed(t, {"jwk": PRIVATE_JWK})],
                   "The DPoP proof's jwk must hold a public key only"),
    _proof_refusal("symmetric jwk", lambda t: [_signed(t, {"jwk": {"kty": "oct", "k": "c2Vj"}})],
                   "The DPoP proof's jwk must hold a public key only"),
    _proof_refusal("jwk of a type the alg does not admit", _listed(_okp_jwk_for_es256),
                   "The DPoP proof's jwk is not a usable key for its alg"),
    _proof_refusal("RSA key of 1024 bits", _listed(_weak_rsa),
                   "The DPoP proof's RSA key must be 2048 to 4096 bits"),
    _proof_refusal("another key's signature", lambda t: [_signed(t, key=STRANGER)],
                   "The DPoP proof's signature does not verify"),
    _proof_refusal("tampered payload", lambda t: [_tampered(t)],
                   "The DPoP proof's signature does not verify"),
    _proof_refusal("missing jti", lambda t: [_signed(t, jti=None)],
                   "The DPoP proof needs a jti of 8 to 256 characters"),
    _proof_refusal("jti of 4 characters", lambda t: [_signed(t, jti="abcd")],
                   "The DPoP proof needs a jti of 8 to 256 characters"),
    _proof_refusal("htm GET for a POST", lambda t: [_signed(t, htm="GET")],
                   "The DPoP proof's htm is not this request's method"),
    _proof_refusal("htu of another path", lambda t: [_signed(t, htu="https://mcp.example.com/other")],
                   NOT_THE_URI),
    _proof_refusal("htu of another host", lambda t: [_signed(t, htu="https://evil.example/mcp")],
                   NOT_THE_URI),
    _proof_refusal("htu http instead of https",
                   lambda t: [_signed(t, htu="http://mcp.example.com/mcp")], NOT_THE_URI),
    _proof_refusal("htu of another port",
                   lambda t: [_signed(t, htu="https://mcp.example.com:8443/mcp")], NOT_THE_URI),
    _proof_refusal("htu not a URL", lambda t: [_signed(t, htu="/mcp")], NOT_THE_URI),
    _proof_refusal("iat an hour old", lambda t: [_signed(t, iat=int(time.time()) - 3600)], WINDOW),
    _proof_refusal("iat an hour ahead", lambda t: [_signed(t, iat=int(time.time()) + 3600)],
                   WINDOW),
    _proof_refusal("iat a string", lambda t: [_signed(t, iat="now")],
                   "The DPoP proof needs a numeric iat"),
    _proof_refusal("missing ath", lambda t: [_signed(t, ath=None)],
                   "The DPoP proof's ath does not match the access token"),
    _proof_refusal("ath of another token", lambda t: [_signed(t, ath=access_token_hash("other"))],
                   "The DPoP proof's ath does not match the access token"),
    _proof_refusal("jwk thumbprint is not the token's cnf.jkt",
                   lambda t: [proof(t, OTHER, "EdDSA")],
                   "The DPoP proof's key is not the key the token is bound to"),
    Refusal("replayed jti", _dpop(lambda t: [proof(t)]), "invalid_dpop_proof",
            "The DPoP proof was used before: make a new one per request", twice=True),
    Refusal("bound token as Bearer",
            lambda bound, unbound: [("Authorization", f"Bearer {bound}"), ("DPoP", proof(bound))],
            "invalid_token", "This token is DPoP-bound: send it with the DPoP scheme"),
    Refusal("bound token as Bearer without a proof",
            lambda bound, unbound: [("Authorization", f"Bearer {bound}")],
            "invalid_token", "This token is DPoP-bound: send it with the DPoP scheme"),
    Refusal("unbound token with the DPoP scheme",
            lambda bound, unbound: dpop_headers(unbound, proof(unbound)),
            "invalid_token", "This token is not DPoP-bound: send it with the Bearer scheme"),
    Refusal("Bearer when DPoP is required",
            lambda bound, unbound: [("Authorization", f"Bearer {unbound}")],
            "invalid_token", "This resource accepts DPoP-bound tokens only",
            policy={"required": True}),
    Refusal("a bad proof when DPoP is required", _dpop(lambda t: [_signed(t, htm="GET")]),
            "invalid_dpop_proof", "The DPoP proof's htm is not this request's method",
            policy={"required": True}),
    Refusal("nonce missing when required", _with_nonce(None), "use_dpop_nonce", NONCE,
            policy=NEEDS_NONCE),
    Refusal("stale nonce (two windows old)",
            _with_nonce(DPoPNonces(NONCE_KEY).current(time.time() - 2 * NONCE_WINDOW_SECONDS)),
            "use_dpop_nonce", NONCE, policy=NEEDS_NONCE),
    Refusal("nonce of another server",
            _with_nonce(DPoPNonces(b"another server's nonce key").current(time.time())),
            "use_dpop_nonce", NONCE, policy=NEEDS_NONCE),
]  # fmt: skip


def expected_challenges(error: str, description: str, *, required: bool) -> list[str]:
    """Bearer without the error (unless DPoP is required: no Bearer at all), then DPoP with it;
    both name the scope and the metadata."""
    bearer = f'Bearer resource_metadata="{PRM}", scope="mcp:basic"'
    dpop = (
        f'DPoP error="{error}", error_description="{description}", '
        f'resource_metadata="{PRM}", scope="mcp:basic", {ALGS}'
    )
    return [dpop] if required else [bearer, dpop]


@pytest.mark.parametrize("case", REFUSALS, ids=[r.name for r in REFUSALS])
async def test_each_refusal_has_its_exact_status_error_and_challenges(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp, case: Refusal
) -> None:
    bound, unbound = bound_token(auth_server), auth_server.mint()
    headers = case.send(bound, unbound)
    middleware = protect(dpop=DPoP(**case.policy), policy=ScopePolicy(required="mcp:basic"))
    async with client_for(middleware) as client:
        if case.twice:
            first = await client.post("/mcp", json=rpc("ping"), headers=headers)
            assert first.status_code == 200, first.text
            recording_app.calls.clear()
        response = await client.post("/mcp", json=rpc("ping"), headers=headers)
    assert response.status_code == case.status, response.text
    assert response.json() == {"error": case.error, "error_description": case.description}
    assert response.headers.get_list("www-authenticate") == expected_challenges(
        case.error, case.description, required=bool(case.policy.get("required"))
    )
    if case.error == "use_dpop_nonce":
        assert DPoPNonces(NONCE_KEY).accepts(response.headers["DPoP-Nonce"], time.time())
    else:
        assert "dpop-nonce" not in response.headers
    assert recording_app.calls == []


def test_the_table_covers_what_the_conformance_suite_will_check() -> None:
    assert len(REFUSALS) >= 20
    assert len({r.name for r in REFUSALS}) == len(REFUSALS)
    assert {r.error for r in REFUSALS} == {"invalid_dpop_proof", "invalid_token", "use_dpop_nonce"}


async def test_insufficient_scope_with_dpop_is_403_with_the_error_in_the_dpop_challenge(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    token = bound_token(auth_server)
    middleware = protect(policy=ScopePolicy(required="mcp:basic", tools={"delete": "files:write"}))
    call = rpc("tools/call", {"name": "delete", "arguments": {}})
    async with client_for(middleware) as client:
        response = await client.post("/mcp", json=call, headers=dpop_headers(token, proof(token)))
    description = "This operation needs the scopes: files:write mcp:basic"
    assert response.status_code == 403
    assert response.json() == {"error": "insufficient_scope", "error_description": description}
    assert response.headers.get_list("www-authenticate") == [
        f'Bearer resource_metadata="{PRM}", scope="files:write mcp:basic"',
        f'DPoP error="insufficient_scope", scope="files:write mcp:basic", '
        f'resource_metadata="{PRM}", error_description="{description}", {ALGS}',
    ]
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


# (the request's path as sent, the proof's htu): the same URI after RFC 9449 §4.3 normalisation
SAME_URI = [
    ("/mcp?x=2", f"{URL}?x=1#frag"),  # query and fragment are not compared
    ("/mcp", "https://mcp.example.com:443/mcp"),  # the scheme's default port
    ("/mcp", "HTTPS://MCP.Example.COM/mcp"),  # scheme and host case
    ("/mcp", "https://mcp.example.com/%6Dcp"),  # an escaped unreserved character
    ("/mcp/a%2Fb", "https://mcp.example.com/mcp/a%2fb"),  # an escaped slash stays escaped
    ("/mcp/caf%C3%A9", "https://mcp.example.com/mcp/caf%c3%a9"),  # UTF-8, escaped
]


@pytest.mark.parametrize(("path", "htu"), SAME_URI, ids=[htu for _, htu in SAME_URI])
async def test_a_proof_names_the_uri_as_the_client_sent_it(
    protect: Any, auth_server: FakeAuthorizationServer, path: str, htu: str
) -> None:
    token = bound_token(auth_server)
    claims = {"htu": htu}
    async with client_for(protect()) as client:
        response = await client.post(
            path, json=rpc("ping"), headers=dpop_headers(token, _signed(token, **claims))
        )
    assert response.status_code == 200, response.text


async def test_a_proof_for_the_decoded_path_is_not_one_for_the_escaped_path(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    # /mcp/a%2Fb and /mcp/a/b are different resources: a proof of one is not one of the other
    token = bound_token(auth_server)
    wrong = _signed(token, htu="https://mcp.example.com/mcp/a/b")
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp/a%2Fb", json=rpc("ping"), headers=dpop_headers(token, wrong)
        )
    assert response.status_code == 401
    assert response.json()["error_description"] == NOT_THE_URI


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"path": "/mcp/a/b", "raw_path": b"/mcp/a%2Fb?q=1"}, "/mcp/a%2Fb"),
        ({"path": "/api/mcp", "raw_path": b"/api/mcp", "root_path": "/api"}, "/api/mcp"),
        # a server that leaves root_path out of raw_path: its path is the one to trust
        ({"path": "/api/mcp", "raw_path": b"/mcp", "root_path": "/api"}, "/api/mcp"),
        ({"path": "/mcp"}, "/mcp"),
        ({"path": "", "raw_path": b""}, "/"),
    ],
)
def test_the_path_compared_is_the_raw_path_when_it_agrees_with_the_path(
    scope: dict[str, Any], expected: str
) -> None:
    assert request_path(scope) == expected


async def test_nonces_are_required_when_configured_and_come_with_each_accepted_request(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    token = bound_token(auth_server)
    policy = DPoP(nonce_key=NONCE_KEY)
    async with client_for(protect(dpop=policy)) as client:
        refused = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token))
        )
        assert refused.status_code == 401
        assert refused.json()["error"] == "use_dpop_nonce"
        nonce = refused.headers["DPoP-Nonce"]
        accepted = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token, nonce=nonce))
        )
        assert accepted.status_code == 200, accepted.text
        # the current nonce goes out with the answer, so the client never falls behind
        assert accepted.headers["DPoP-Nonce"] == policy.nonce_header()["DPoP-Nonce"]
        assert accepted.headers.get_list("DPoP-Nonce") == [accepted.headers["DPoP-Nonce"]]
        plain = await client.post("/mcp", json=rpc("ping"), headers=bearer(auth_server.mint()))
        assert plain.status_code == 200
        assert "dpop-nonce" not in plain.headers  # a Bearer client has no use for it
    # another replica with the same key accepts the same nonce
    async with client_for(protect(dpop=DPoP(nonce_key=NONCE_KEY))) as other:
        elsewhere = await other.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token, nonce=nonce))
        )
    assert elsewhere.status_code == 200


async def test_the_applications_own_nonce_header_is_left_alone(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"dpop-nonce", b"the-app-s-own")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    token = bound_token(auth_server)
    policy = DPoP(nonce_key=NONCE_KEY)
    nonce = policy.nonce_header()["DPoP-Nonce"]
    async with client_for(protect(app=app, dpop=policy)) as client:
        response = await client.post(
            "/mcp", json=rpc("ping"), headers=dpop_headers(token, proof(token, nonce=nonce))
        )
    assert response.headers.get_list("DPoP-Nonce") == ["the-app-s-own"]


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
    assert await past.first_use("a", later)  # an expired proof's key is free again
    assert not await past.first_use("a", later)
    with pytest.raises(ValueError, match="at least 1"):
        MemoryReplayCache(max_entries=0)


async def test_by_default_the_replay_record_holds_a_window_of_a_busy_process_s_proofs() -> None:
    """A proof stays recorded for as long as it can be accepted; a record too small for the
    proofs one process checks in that time answers 503 to every DPoP caller once full (one
    process checks about 1,100 proofs a second behind an MCP SDK app)."""
    record = MemoryReplayCache()
    window = MAX_AGE + CLOCK_SKEW
    expires_at = time.time() + window
    for n in range(1_200 * window):
        assert await record.first_use(f"proof-{n}", expires_at)
    assert len(record) == 1_200 * window


async def test_the_replay_record_forgets_in_order_of_expiry() -> None:
    record = MemoryReplayCache(max_entries=3)
    now = time.time()
    assert await record.first_use("late", now + 60)
    assert await record.first_use("early", now - 1)
    assert await record.first_use("later", now + 120)  # "early" makes room for it
    assert len(record) == 2
    assert not await record.first_use("late", now + 60)
    assert not await record.first_use("later", now + 120)


async def test_the_replay_record_frees_a_key_the_moment_its_proof_expires() -> None:
    record = MemoryReplayCache(max_entries=2)
    start = 1_800_000_000.25
    with freeze_time(datetime.fromtimestamp(start, UTC)) as clock:
        assert await record.first_use("a", start + 0.25)
        assert await record.first_use("b", start + 0.5)
        clock.tick(0.25)  # "a" expires now, within the second it was filed under
        assert await record.first_use("c", start + 60)  # full but for "a": room
        assert not await record.first_use("b", start + 60)
        clock.tick(0.25)
        assert await record.first_use("b", start + 60)  # its old proof has just expired
        assert len(record) == 2
        with pytest.raises(ReplayCacheFull):
            await record.first_use("d", start + 60)


async def test_a_key_recorded_again_outlives_the_second_its_first_proof_expired_in() -> None:
    record = MemoryReplayCache()
    start = 1_800_000_000.25
    with freeze_time(datetime.fromtimestamp(start, UTC)) as clock:
        assert await record.first_use("a", start + 0.25)
        clock.tick(0.25)
        assert await record.first_use("a", start + 60)  # expired: recorded again
        clock.tick(1)  # the second of its first expiry is dropped whole, not its new record
        assert not await record.first_use("a", start + 60)
        assert len(record) == 1


async def test_the_replay_record_refuses_an_expiry_that_is_not_a_number() -> None:
    record = MemoryReplayCache()
    for never in (math.inf, math.nan):
        with pytest.raises(ValueError, match="finite"):
            await record.first_use("a", never)
    assert len(record) == 0


def _collector_visits(record: MemoryReplayCache) -> int:
    """How many objects the cyclic garbage collector visits when it walks ``record``'s state:
    the referents of each object it tracks, from the record's attributes down (types, which
    are not the record's, left out)."""
    visits, seen = 0, set()
    pending: list[Any] = [vars(record)]
    while pending:
        for referent in gc.get_referents(pending.pop()):
            visits += 1
            if isinstance(referent, type):
                continue
            if gc.is_tracked(referent) and id(referent) not in seen:
                seen.add(id(referent))
                pending.append(referent)
    return visits


async def test_the_collector_walks_a_few_objects_of_a_replay_record_of_any_size() -> None:
    record = MemoryReplayCache()
    now = time.time()
    for i in range(3000):  # a thousand proofs a second, for three seconds
        assert await record.first_use(f"proof-{i}", int(now) + 300 + i // 1000)
    gc.collect()
    assert len(record) == 3000
    assert _collector_visits(record) < 30


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


def documented_sqlite_record() -> Any:
    """The ``SQLiteReplayCache`` of docs/api/middleware.md, as written there."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "api" / "middleware.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    (block,) = [b for b in blocks if "class SQLiteReplayCache" in b]
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block, str(doc), "exec"), namespace)  # noqa: S102
    return namespace["SQLiteReplayCache"]


async def test_the_documented_shared_record_is_shared_bounded_and_forgets_expired_proofs(
    protect: Any, auth_server: FakeAuthorizationServer, tmp_path: Path
) -> None:
    record = documented_sqlite_record()
    path = str(tmp_path / "proofs.sqlite3")
    one, other = record(path, max_entries=2), record(path, max_entries=2)
    later = time.time() + 60
    assert await one.first_use("a", later)
    assert not await other.first_use("a", later)  # another process's record
    assert await other.first_use("b", time.time() - 1)  # already expired
    assert await one.first_use("c", later)  # the expired one made room
    with pytest.raises(ReplayCacheFull):
        await other.first_use("d", later)
    # two middlewares (replicas) on the same file: a proof taken at one is refused at the other
    token = bound_token(auth_server)
    once = proof(token)
    shared = record(str(tmp_path / "replicas.sqlite3"))
    async with client_for(protect(dpop=DPoP(replay=shared))) as first:
        assert (await send(first, token, once)).status_code == 200
    async with client_for(protect(dpop=DPoP(replay=record(shared.path)))) as second:
        replayed = await send(second, token, once)
    assert replayed.status_code == 401
    assert replayed.json()["error"] == "invalid_dpop_proof"
