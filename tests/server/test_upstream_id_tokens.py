"""ID tokens from an upstream OpenID provider (docs/security.md T35): one valid token is
accepted, and a table of hostile or broken ones, signed locally, is each refused with the rule
it breaks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import jwt as pyjwt
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mcpauth.server.identity.id_tokens import (
    IDTokenError,
    UnknownSigningKey,
    allowed_algorithms,
    signing_keys,
    validate_id_token,
)

ISSUER = "https://idp.example"
CLIENT_ID = "mcpauth-at-idp"
NONCE = "n-0S6_WzA2Mj"
NOW = 1_800_000_000

RSA = RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "alg": "RS256", "use": "sig"})
OTHER_RSA = RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "alg": "RS256", "use": "sig"})
EC = ECKey.generate_key("P-256", parameters={"kid": "ec-1", "alg": "ES256", "use": "sig"})
JWKS = {"keys": [RSA.as_dict(private=False), EC.as_dict(private=False)]}
KEYS = signing_keys(JWKS)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISSUER,
        "sub": "248289761001",
        "aud": CLIENT_ID,
        "exp": NOW + 300,
        "iat": NOW - 5,
        "nonce": NONCE,
        "email": "alice@example.com",
        "email_verified": True,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def signed(payload: dict[str, Any] | None = None, *, key: Any = RSA, **header: Any) -> str:
    fields = {"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}
    fields.update(header)
    return jwt.encode({k: v for k, v in fields.items() if v is not None}, payload or claims(), key)


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    parts = [_b64(json.dumps(header).encode()), _b64(json.dumps(payload).encode())]
    return ".".join([*parts, _b64(signature)])


def hs256_with_the_public_key() -> str:
    """The classic key-confusion forgery: HMAC keyed with the provider's public key."""
    header = {"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}
    signing_input = ".".join(
        [_b64(json.dumps(header).encode()), _b64(json.dumps(claims()).encode())]
    )
    secret = json.dumps(RSA.as_dict(private=False)).encode()
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def tampered_signature() -> str:
    head, body, signature = signed().split(".")
    flipped = bytearray(base64.urlsafe_b64decode(signature + "=="))
    flipped[10] ^= 0x01
    return f"{head}.{body}.{_b64(bytes(flipped))}"


def tampered_payload() -> str:
    head, _, signature = signed().split(".")
    body = _b64(json.dumps(claims(sub="someone-else")).encode())
    return f"{head}.{body}.{signature}"


def at_hash(value: str) -> str:
    return _b64(hashlib.sha256(value.encode()).digest()[:16])


def validate(token: str, **options: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "keys": KEYS,
        "issuer": ISSUER,
        "client_id": CLIENT_ID,
        "nonce": NONCE,
        "algorithms": ["RS256", "ES256"],
        "now": NOW,
    }
    values.update(options)
    return validate_id_token(token, **values)


def test_a_valid_id_token_gives_its_claims() -> None:
    assert validate(signed())["sub"] == "248289761001"
    assert validate(signed(key=EC, alg="ES256", kid="ec-1"))["email"] == "alice@example.com"
    # several audiences with azp naming mcpauth; no typ at all; a correct at_hash
    several = claims(aud=[CLIENT_ID, "another-client"], azp=CLIENT_ID)
    assert validate(signed(several, typ=None))["azp"] == CLIENT_ID
    with_hash = claims(at_hash=at_hash("upstream-access-token"))
    assert validate(signed(with_hash), access_token="upstream-access-token")["sub"]
    # clocks a little apart: within the minute of leeway
    assert validate(signed(claims(iat=NOW + 50, exp=NOW - 50)))["sub"]


RS256_ONLY = {"algorithms": ["RS256"]}  # a provider that signs with RS256 alone


def bad(name: str, make: Callable[[], str], reason: str, **options: Any) -> Any:
    return pytest.param(make, reason, options, id=name)


BAD_TOKENS = [
    bad("wrong aud", lambda: signed(claims(aud="someone-else")), "invalid_claim_aud"),
    bad(
        "aud list without us", lambda: signed(claims(aud=["a", "b"], azp="a")), "invalid_claim_aud"
    ),
    bad("wrong iss", lambda: signed(claims(iss="https://evil.example")), "invalid_claim_iss"),
    bad("iss of another tenant", lambda: signed(claims(iss=ISSUER + "/t2")), "invalid_claim_iss"),
    bad("wrong nonce", lambda: signed(claims(nonce="replayed-nonce")), "invalid_claim_nonce"),
    bad("no nonce", lambda: signed(claims(nonce=None)), "missing_claim_nonce"),
    bad("expired", lambda: signed(claims(exp=NOW - 61)), "expired"),
    bad("no exp", lambda: signed(claims(exp=None)), "missing_claim_exp"),
    bad("iat in the future", lambda: signed(claims(iat=NOW + 3600)), "invalid_claim_iat"),
    bad("no iat", lambda: signed(claims(iat=None)), "missing_claim_iat"),
    bad("nbf in the future", lambda: signed(claims(nbf=NOW + 3600)), "invalid_claim_nbf"),
    bad("missing sub", lambda: signed(claims(sub=None)), "missing_claim_sub"),
    bad("empty sub", lambda: signed(claims(sub="")), "invalid_claim_sub"),
    bad("sub too long", lambda: signed(claims(sub="x" * 256)), "invalid_sub"),
    bad(
        "azp another client",
        lambda: signed(claims(aud=[CLIENT_ID, "other"], azp="other")),
        "invalid_claim_azp",
    ),
    bad(
        "several audiences without azp",
        lambda: signed(claims(aud=[CLIENT_ID, "other"])),
        "missing_claim_azp",
    ),
    bad(
        "at_hash of another access token",
        lambda: signed(claims(at_hash=at_hash("something-else"))),
        "invalid_claim_at_hash",
        access_token="upstream-access-token",
    ),
    bad("unknown kid", lambda: signed(kid="rotated-away"), "unknown_kid"),
    bad(
        "alg none",
        lambda: unsigned({"alg": "none", "typ": "JWT"}, claims()),
        "algorithm_not_allowed",
    ),
    bad("HS256 with the public key", hs256_with_the_public_key, "algorithm_not_allowed"),
    bad("tampered signature", tampered_signature, "signature_bad_signature"),
    bad("tampered payload", tampered_payload, "signature_bad_signature"),
    bad("same kid, another key", lambda: signed(key=OTHER_RSA), "signature_bad_signature"),
    bad("wrong typ: an access token", lambda: signed(typ="at+jwt"), "wrong_typ"),
    bad("wrong typ: a logout token", lambda: signed(typ="logout+jwt"), "wrong_typ"),
    bad(
        "an algorithm the provider does not use",
        lambda: signed(key=EC, alg="ES256", kid="ec-1"),
        "algorithm_not_allowed",
        **RS256_ONLY,
    ),
    bad("ES256 naming an RSA key", lambda: signed(key=EC, alg="ES256"), "unknown_kid"),
    bad("encrypted (five parts)", lambda: signed() + ".x.y", "malformed"),
    bad("not a JWT", lambda: "not-a-token", "malformed"),
    bad("oversized", lambda: "a." + "b" * 20_000 + ".c", "malformed"),
]


@pytest.mark.parametrize(("make", "reason", "options"), BAD_TOKENS)
def test_an_invalid_id_token_is_refused_with_its_reason(
    make: Callable[[], str], reason: str, options: dict[str, Any]
) -> None:
    with pytest.raises(IDTokenError) as refused:
        validate(make(), **options)
    assert refused.value.reason == reason
    assert isinstance(refused.value, UnknownSigningKey) == (reason == "unknown_kid")


def test_only_asymmetric_algorithms_are_ever_allowed() -> None:
    assert allowed_algorithms(None) == ["RS256"]
    assert allowed_algorithms(["HS256", "none", "RS256", "ES256"]) == ["ES256", "RS256"]
    assert allowed_algorithms(["HS256"]) == []
    with pytest.raises(IDTokenError):
        validate(signed(), algorithms=["HS256"])


def test_a_jwks_keeps_only_public_signing_keys() -> None:
    private = RSA.as_dict(private=True)
    keys = signing_keys(
        {
            "keys": [
                {"kty": "oct", "k": _b64(b"a shared secret"), "kid": "hmac"},
                {**EC.as_dict(private=False), "use": "enc", "kid": "ec-enc"},
                {**private, "kid": "leaked"},
                RSA.as_dict(private=False),
            ]
        }
    )
    assert [jwk["kid"] for jwk in keys] == ["rsa-1"]
    with pytest.raises(IDTokenError, match="jwks_not_a_key_set"):
        signing_keys({"keys": "none"})
    with pytest.raises(IDTokenError, match="jwks_unusable"):  # nothing left to verify with
        signing_keys({"keys": [{"kty": "oct", "k": _b64(b"a shared secret"), "kid": "hmac"}]})


def signed_by_pyjwt(alg: str, key: Any = RSA, **header: Any) -> str:
    """A token joserfc would not sign (an algorithm it does not recommend, a ``crit``)."""
    private = pyjwt.PyJWK(key.as_dict(private=True), algorithm=alg).key
    return pyjwt.encode(claims(), private, algorithm=alg, headers=header)


def test_a_provider_key_without_kid_or_alg_verifies_what_it_admits() -> None:
    """A provider publishing one key without ``kid`` signs tokens without one; an RSA key
    without ``alg`` verifies any RSA algorithm the provider advertises, and nothing else."""
    bare = {k: v for k, v in RSA.as_dict(private=False).items() if k not in ("kid", "alg")}
    keys = signing_keys({"keys": [bare]})
    assert validate(signed(kid=None), keys=keys)["sub"] == "248289761001"
    assert validate(signed_by_pyjwt("PS256"), keys=keys, algorithms=["PS256"])["sub"]
    with pytest.raises(UnknownSigningKey):  # an EC algorithm names no key of this set
        validate(signed(kid=None, key=EC, alg="ES256"), keys=keys, algorithms=["ES256"])
    with pytest.raises(UnknownSigningKey):  # with two keys, a token must say which
        validate(signed(kid=None), keys=signing_keys({"keys": [bare, bare]}))
    with pytest.raises(UnknownSigningKey):  # a key with alg RS256 admits no other
        validate(signed_by_pyjwt("PS256", kid="rsa-1"), algorithms=["PS256"])


def rs256_by_hand(header: dict[str, Any]) -> str:
    """A correctly signed token with exactly ``header`` (no library adds or drops a member)."""
    signing_input = ".".join(
        [_b64(json.dumps(header).encode()), _b64(json.dumps(claims()).encode())]
    )
    private = pyjwt.PyJWK(RSA.as_dict(private=True), algorithm="RS256").key
    signature = pyjwt.get_algorithm_by_name("RS256").sign(signing_input.encode(), private)
    return f"{signing_input}.{_b64(signature)}"


def test_a_critical_header_parameter_is_refused() -> None:
    header = {"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}
    assert validate(rs256_by_hand(header))["sub"]  # the same token without crit is valid
    for crit in ({"crit": ["exp"], "exp": NOW + 60}, {"crit": ["b64"], "b64": True}):
        with pytest.raises(IDTokenError) as refused:
            validate(rs256_by_hand({**header, **crit}))
        assert refused.value.reason in ("malformed", "signature_unsupported_crit")
    with pytest.raises(IDTokenError, match="signature_unsupported_crit"):  # one PyJWT knows
        validate(rs256_by_hand({**header, "crit": ["b64"], "b64": True}))
