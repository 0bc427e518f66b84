"""docs/security.md T14-T17: each forged or misused token gets 401 and
the application is never reached."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from mcpauth import jwt
from mcpauth.middleware import Limits

from .helpers import (
    OTHER_RESOURCE,
    FakeAuthorizationServer,
    RecordingApp,
    bearer,
    client_for,
    rpc,
)

pytestmark = pytest.mark.anyio


def _b64(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def alg_none(server: FakeAuthorizationServer) -> str:
    header = {"alg": "none", "typ": "at+jwt", "kid": server.kid}
    return f"{_b64(header)}.{_b64(server.claims())}."


def hs256_with_public_key(server: FakeAuthorizationServer) -> str:
    pem = server.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "at+jwt", "kid": server.kid}
    signing_input = f"{_b64(header)}.{_b64(server.claims())}".encode()
    import hmac

    signature = hmac.new(pem, signing_input, "sha256").digest()
    return signing_input.decode() + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()


def embedded_jwk(server: FakeAuthorizationServer) -> str:
    attacker = ec.generate_private_key(ec.SECP256R1())
    attacker_jwk = jwt.public_jwk(attacker.public_key(), kid=server.kid, alg="ES256")
    headers = {"kid": server.kid, "typ": "at+jwt", "jwk": attacker_jwk}
    return pyjwt.encode(server.claims(), attacker, algorithm="ES256", headers=headers)


def jku_header(server: FakeAuthorizationServer) -> str:
    headers = {"kid": server.kid, "typ": "at+jwt", "jku": "https://evil.example/jwks"}
    return pyjwt.encode(server.claims(), server.key, algorithm="ES256", headers=headers)


def x5u_header(server: FakeAuthorizationServer) -> str:
    headers = {"kid": server.kid, "typ": "at+jwt", "x5u": "https://evil.example/cert"}
    return pyjwt.encode(server.claims(), server.key, algorithm="ES256", headers=headers)


def attacker_key_with_known_kid(server: FakeAuthorizationServer) -> str:
    attacker = ec.generate_private_key(ec.SECP256R1())
    headers = {"kid": server.kid, "typ": "at+jwt"}
    return pyjwt.encode(server.claims(), attacker, algorithm="ES256", headers=headers)


def unknown_crit(server: FakeAuthorizationServer) -> str:
    headers = {"kid": server.kid, "typ": "at+jwt", "crit": ["x"], "x": 1}
    return pyjwt.encode(server.claims(), server.key, algorithm="ES256", headers=headers)


def now() -> int:
    return int(time.time())


FORGERIES: dict[str, Callable[[FakeAuthorizationServer], str]] = {
    "a token for another resource (T14, RS-09)": lambda s: s.mint(aud=OTHER_RESOURCE),
    "a token without aud (T14)": lambda s: s.mint(aud=None),
    "a token whose aud list lacks this resource (T14)": lambda s: s.mint(
        aud=[OTHER_RESOURCE, "https://mcp.example.com"]
    ),
    "alg none (T15)": alg_none,
    "HS256 signed with the public key PEM (T15)": hs256_with_public_key,
    "an embedded jwk header (T15)": embedded_jwk,
    "a jku header (T15)": jku_header,
    "an x5u header (T15)": x5u_header,
    "a kid pointing to an unknown key (T15)": lambda s: s.mint(kid="no-such-key"),
    "a path-traversal kid (T15)": lambda s: s.mint(kid="../../../../etc/passwd"),
    "an attacker key under a known kid (T15)": attacker_key_with_known_kid,
    "an unknown crit header (T15)": unknown_crit,
    "typ JWT instead of at+jwt (T15)": lambda s: s.mint(typ="JWT"),
    "a wrong issuer (T15)": lambda s: s.mint(iss="https://evil.example.com"),
    "an expired token (T15)": lambda s: s.mint(exp=now() - 120, iat=now() - 600),
    "nbf in the future (T15)": lambda s: s.mint(nbf=now() + 600),
    "a token without client_id": lambda s: s.mint(client_id=None),
    "a garbage token": lambda s: "not.a.jwt",
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
async def test_forged_or_misdirected_tokens_get_401_invalid_token_and_never_reach_the_app(
    forge: Callable[[FakeAuthorizationServer], str],
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    protect: Any,
) -> None:
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(forge(auth_server))
        )
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="')
    assert response.json()["error"] == "invalid_token"
    assert recording_app.calls == []


async def test_a_valid_token_reaches_the_app_so_the_forgery_tests_mean_something(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer(auth_server.mint())
        )
    assert response.status_code == 200
    assert len(recording_app.calls) == 1


async def test_a_token_in_the_query_string_is_ignored_t17(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    token = auth_server.mint()
    async with client_for(protect()) as client:
        response = await client.post("/mcp", params={"access_token": token}, json=rpc("tools/list"))
    assert response.status_code == 401
    assert "error=" not in response.headers["www-authenticate"]
    assert recording_app.calls == []


async def test_a_token_in_a_form_body_is_ignored_t17(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    async with client_for(protect()) as client:
        response = await client.post("/mcp", data={"access_token": auth_server.mint()})
    assert response.status_code == 401
    assert recording_app.calls == []


async def test_a_one_megabyte_authorization_header_is_refused_before_decoding_t16(
    recording_app: RecordingApp, protect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_decode(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an oversized token was decoded")

    monkeypatch.setattr(pyjwt, "get_unverified_header", must_not_decode)
    monkeypatch.setattr(pyjwt, "decode", must_not_decode)
    monkeypatch.setattr(jwt, "unverified_header", must_not_decode)
    monkeypatch.setattr(jwt, "verify", must_not_decode)
    async with client_for(protect()) as client:
        response = await client.post(
            "/mcp", json=rpc("tools/list"), headers=bearer("a" * (1024 * 1024))
        )
    assert response.status_code == 401
    assert "too large" in response.headers["www-authenticate"]
    assert recording_app.calls == []


async def test_a_token_with_ten_thousand_scopes_is_handled_without_error_t16(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    scope = " ".join(f"s{i}" for i in range(10_000))
    token = auth_server.mint(scope=scope)
    async with client_for(protect(limits=Limits(max_header_bytes=1024 * 1024))) as client:
        response = await client.post("/mcp", json=rpc("tools/list"), headers=bearer(token))
    assert response.status_code == 401  # above jwt.MAX_TOKEN_LENGTH: refused, not parsed
    assert recording_app.calls == []


async def test_forwarded_host_headers_do_not_change_the_advertised_metadata_url_t26(
    protect: Any,
) -> None:
    spoofed = {
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Proto": "http",
        "Host": "evil.example",
    }
    async with client_for(protect()) as client:
        response = await client.post("/mcp", json=rpc("tools/list"), headers=spoofed)
        document = await client.get("/.well-known/oauth-protected-resource/mcp", headers=spoofed)
    assert (
        'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"'
        in response.headers["www-authenticate"]
    )
    assert document.json()["resource"] == "https://mcp.example.com/mcp"
