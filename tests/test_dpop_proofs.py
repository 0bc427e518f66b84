"""DPoP proofs (RFC 9449, docs/security.md T30): a proof made by ``make_proof`` passes
``check_proof``, and each malformed or hostile proof is refused with its exact error. These
are the checks the token endpoint and the middleware share."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mcpauth import jwt
from mcpauth.dpop import (
    _HEADER_CACHE_SIZE,
    MAX_AGE,
    _header_key,
    access_token_hash,
    check_proof,
    make_proof,
    normal_htu,
)
from mcpauth.errors import InvalidDPoPProof, UseDPoPNonce

URL = "https://as.example.com/token"
NOW = 1_800_000_000
KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())
TOKEN = "an-access-token"


def _jwk(key: Any, alg: str = "ES256") -> dict[str, Any]:
    public = jwt.public_jwk(key.public_key(), kid="k", alg=alg)
    return {k: v for k, v in public.items() if k not in ("kid", "alg", "use")}


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {"jti": "proof-0001", "htm": "POST", "htu": URL, "iat": NOW}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def _proof(
    claims: dict[str, Any] | None = None,
    *,
    key: Any = KEY,
    alg: str = "ES256",
    header: dict[str, Any] | None = None,
) -> str:
    headers = {"typ": "dpop+jwt", "jwk": _jwk(key, alg)}
    headers.update(header or {})
    headers = {k: v for k, v in headers.items() if v is not None}
    return pyjwt.encode(claims or _claims(), key, algorithm=alg, headers=headers)


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _unsigned(alg: str) -> str:
    header = {"typ": "dpop+jwt", "alg": alg, "jwk": _jwk(KEY)}
    return f"{_b64(header)}.{_b64(_claims())}."


def _tampered() -> str:
    head, _, sig = _proof().split(".")
    return f"{head}.{_b64(_claims(htm='GET'))}.{sig}"


def _hs256_with_public_key() -> str:
    """The classic confusion: an HMAC "signed" with the public key the header carries."""
    header = {"typ": "dpop+jwt", "alg": "HS256", "jwk": _jwk(KEY)}
    signing_input = f"{_b64(header)}.{_b64(_claims())}"
    secret = json.dumps(_jwk(KEY)).encode()
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def _private_jwk() -> str:
    private = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(KEY))
    return _proof(header={"jwk": private})


def _small_rsa() -> str:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyJWT warns when signing with such a key
        return _proof(key=small, alg="RS256")


def _wrong_key_in_header() -> str:
    return _proof(header={"jwk": _jwk(OTHER)})


def _raw(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


GOOD_HEADER = _raw(json.dumps({"typ": "dpop+jwt", "alg": "ES256", "jwk": _jwk(KEY)}).encode())
GOOD_PAYLOAD = _raw(json.dumps(_claims()).encode())


def _signed_segments(header: str = GOOD_HEADER, payload: str = GOOD_PAYLOAD) -> str:
    """A compact JWS of these exact segments, signed by KEY (ES256)."""
    signing_input = f"{header}.{payload}".encode()
    signature = pyjwt.algorithms.ECAlgorithm(pyjwt.algorithms.ECAlgorithm.SHA256).sign(
        signing_input, KEY
    )
    return f"{header}.{payload}.{_raw(signature)}"


def _non_canonical_header() -> str:
    """The good header's JSON (padded with spaces to leave unused bits in the last character)
    in a base64url spelling with those bits set: lenient decoders read the same bytes."""
    data = json.dumps({"typ": "dpop+jwt", "alg": "ES256", "jwk": _jwk(KEY)}).encode()
    data += b" " * ((1 - len(data)) % 3)  # len % 3 == 1: the last character has 4 unused bits
    canonical = _raw(data)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spelled = canonical[:-1] + alphabet[alphabet.index(canonical[-1]) + 1]
    assert base64.urlsafe_b64decode(spelled + "==") == data
    return spelled


def _with_signature(signature: str) -> str:
    head, payload, _ = _signed_segments().split(".")
    return f"{head}.{payload}.{signature}"


P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _s_out_of_range() -> str:
    """The good signature's R with S the order of P-256's group (S must be below it)."""
    signature = base64.urlsafe_b64decode(_signed_segments().split(".")[2] + "==")
    return _with_signature(_raw(signature[:32] + P256_ORDER.to_bytes(32, "big")))


def _c(**changes: Any) -> str:
    return _proof(_claims(**changes))


def _check(proof: str | list[str], **options: Any) -> Any:
    values = proof if isinstance(proof, list) else [proof]
    return check_proof(values, method="POST", url=URL, now=NOW, **options)


def test_a_proof_made_here_passes_and_names_its_key() -> None:
    proof = make_proof(KEY, alg="ES256", method="post", url=URL + "?x=1#f", now=NOW)
    checked = _check(proof)
    assert checked.jkt == jwt.thumbprint(_jwk(KEY))
    assert checked.iat == NOW
    assert len(checked.replay_key) == 43
    assert (
        checked.replay_key
        != _check(make_proof(KEY, alg="ES256", method="POST", url=URL, now=NOW)).replay_key
    )


@pytest.mark.parametrize(
    "key", [ec.generate_private_key(ec.SECP256R1()), ed25519.Ed25519PrivateKey.generate()]
)
def test_each_allowed_key_type_passes(key: Any) -> None:
    alg = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "EdDSA"
    _check(make_proof(key, alg=alg, method="POST", url=URL, now=NOW))


def test_ath_is_that_of_rfc_9449s_example() -> None:
    # RFC 9449 §7.1: the example's access token and the ath of its proof
    token = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
    assert access_token_hash(token) == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"


def test_the_replay_key_is_the_base64url_sha256_of_thumbprint_and_jti() -> None:
    # replicas of different versions share a record: the key must not change form
    checked = _check(_proof())
    digest = hashlib.sha256(f"{checked.jkt}:{checked.jti}".encode()).digest()
    assert checked.replay_key == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_a_resource_server_checks_ath_and_the_bound_key() -> None:
    proof = make_proof(KEY, alg="ES256", method="POST", url=URL, access_token=TOKEN, now=NOW)
    jkt = jwt.thumbprint(_jwk(KEY))
    assert _check(proof, access_token=TOKEN, jkt=jkt).jkt == jkt


def test_a_required_nonce_is_asked_for_with_use_dpop_nonce() -> None:
    without = make_proof(KEY, alg="ES256", method="POST", url=URL, now=NOW)
    with pytest.raises(UseDPoPNonce):
        _check(without, nonce="n-1")
    stale = make_proof(KEY, alg="ES256", method="POST", url=URL, nonce="n-0", now=NOW)
    with pytest.raises(UseDPoPNonce):
        _check(stale, nonce="n-1")
    fresh = make_proof(KEY, alg="ES256", method="POST", url=URL, nonce="n-1", now=NOW)
    _check(fresh, nonce="n-1")


HOSTILE: list[tuple[str, Callable[[], str | list[str]], dict[str, Any], str]] = [
    ("no header", lambda: [], {}, "A DPoP proof is required"),
    ("two headers", lambda: [_proof(), _proof()], {}, "Exactly one DPoP header"),
    ("empty", lambda: "", {}, "empty or too long"),
    ("too long", lambda: "a" * 9000, {}, "empty or too long"),
    ("not a JWT", lambda: "not.a.jwt", {}, "not a JWT"),
    ("four segments", lambda: _signed_segments() + ".e30", {}, "not a JWT"),
    ("a padded header", lambda: _signed_segments(GOOD_HEADER + "="), {}, "not a JWT"),
    ("a header in non-canonical base64", lambda: _signed_segments(_non_canonical_header()), {},
     "not a JWT"),
    ("a header that is a JSON array", lambda: _signed_segments(_raw(b"[1]")), {}, "not a JWT"),
    ("a header nested 5000 deep", lambda: _signed_segments(_raw(b"[" * 5000)), {}, "not a JWT"),
    ("a header that is not UTF-8", lambda: _signed_segments(_raw(b"\xff\xfe{")), {}, "not a JWT"),
    ("crit in the header", lambda: _proof(header={"crit": ["exp"]}), {}, "extensions"),
    ("an unencoded payload (b64 false)", lambda: _proof(header={"b64": False}), {}, "extensions"),
    ("a payload that is not JSON", lambda: _signed_segments(payload=_raw(b"not json")), {},
     "cannot be read"),
    ("a payload that is a JSON array", lambda: _signed_segments(payload=_raw(b"[]")), {},
     "cannot be read"),
    ("a payload nested 5000 deep", lambda: _signed_segments(payload=_raw(b"[" * 5000)), {},
     "cannot be read"),
    ("a payload segment with a non-ASCII character",
     lambda: _signed_segments().replace(".", ".\u00e9", 1), {}, "cannot be read"),
    ("a header segment with a non-ASCII character", lambda: "\u00e9" + _signed_segments(), {},
     "not a JWT"),
    ("no signature", lambda: _with_signature(""), {}, "cannot be read"),
    ("a padded signature", lambda: _signed_segments() + "=", {}, "cannot be read"),
    ("a signature of the wrong length", lambda: _with_signature(_raw(b"x" * 63)), {},
     "signature does not verify"),
    ("a signature one byte too long", lambda: _with_signature(_raw(b"x" * 65)), {},
     "signature does not verify"),
    ("a signature of zeros", lambda: _with_signature(_raw(bytes(64))), {},
     "signature does not verify"),
    ("a signature whose S is out of range", _s_out_of_range, {}, "signature does not verify"),
    ("typ JWT", lambda: _proof(header={"typ": "JWT"}), {}, r"typ must be dpop\+jwt"),
    ("no typ", lambda: _proof(header={"typ": None}), {}, r"typ must be dpop\+jwt"),
    ("alg none", lambda: _unsigned("none"), {}, "alg must be one of"),
    ("HS256 with the public key", _hs256_with_public_key, {}, "alg must be one of"),
    ("no jwk", lambda: _proof(header={"jwk": None}), {}, "carry its public key as jwk"),
    ("private key in jwk", _private_jwk, {}, "public key only"),
    ("symmetric jwk", lambda: _proof(header={"jwk": {"kty": "oct", "k": "c2Vj"}}), {}, "public"),
    ("RSA key of 1024 bits", _small_rsa, {}, "2048 to 4096 bits"),
    ("signed by another key", _wrong_key_in_header, {}, "signature does not verify"),
    ("tampered payload", _tampered, {}, "signature does not verify"),
    ("no jti", lambda: _c(jti=None), {}, "jti of 8 to 256"),
    ("short jti", lambda: _c(jti="abc"), {}, "jti of 8 to 256"),
    ("other method", lambda: _c(htm="GET"), {}, "htm is not"),
    ("no htm", lambda: _c(htm=None), {}, "htm is not"),
    ("other path", lambda: _c(htu="https://as.example.com/authorize"), {}, "htu is not"),
    ("other host", lambda: _c(htu="https://evil.example/token"), {}, "htu is not"),
    ("http, not https", lambda: _c(htu="http://as.example.com/token"), {}, "htu is not"),
    ("relative htu", lambda: _c(htu="/token"), {}, "htu is not"),
    ("no iat", lambda: _c(iat=None), {}, "numeric iat"),
    ("iat as text", lambda: _c(iat=str(NOW)), {}, "numeric iat"),
    ("stale iat", lambda: _c(iat=NOW - MAX_AGE - 1), {}, "outside the accepted"),
    ("future iat", lambda: _c(iat=NOW + 120), {}, "outside the accepted"),
    ("no ath with a token", _proof, {"access_token": TOKEN}, "ath does not match"),
    ("ath of another token", lambda: _c(ath=access_token_hash("x")), {"access_token": "t"}, "ath"),
    ("bound to another key", _proof, {"jkt": jwt.thumbprint(_jwk(OTHER))}, "bound to"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "make", "options", "message"), HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_a_hostile_proof_is_refused_with_invalid_dpop_proof(
    case: str, make: Callable[[], str | list[str]], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDPoPProof, match=message) as refused:
        _check(make(), **options)
    assert refused.value.error == "invalid_dpop_proof"
    assert refused.value.status_code == 400


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("https://AS.example.com/token", "https://as.example.com/token"),
        ("https://as.example.com:443/token", "https://as.example.com/token"),
        ("http://127.0.0.1:80/x", "http://127.0.0.1/x"),
        ("https://as.example.com/a%7Eb", "https://as.example.com/a~b"),
        ("https://as.example.com/a%2fb", "https://as.example.com/a%2Fb"),
        ("https://as.example.com", "https://as.example.com/"),
        ("https://as.example.com/t?q=1#frag", "https://as.example.com/t"),
    ],
)
def test_htu_is_compared_after_normalisation(first: str, second: str) -> None:
    assert normal_htu(first) == normal_htu(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("https://as.example.com/Token", "https://as.example.com/token"),
        ("https://as.example.com:8443/token", "https://as.example.com/token"),
        ("https://as.example.com/a%2Fb", "https://as.example.com/a/b"),
    ],
)
def test_htu_differences_that_matter_stay(first: str, second: str) -> None:
    assert normal_htu(first) != normal_htu(second)


@pytest.mark.parametrize(
    "url",
    [
        "https://AS.example.com:443/a%7eb/%2f?q=1#f",
        "http://[::1]:8080/x%41y",
        "https://as.example.com",
        "http://127.0.0.1:80/%e2%82%ac",
    ],
)
def test_a_normal_htu_is_its_own_normal_form(url: str) -> None:
    # check_proof compares an htu already in normal form as it is
    assert normal_htu(normal_htu(url)) == normal_htu(url)


def test_an_htu_not_in_normal_form_still_names_the_request() -> None:
    assert _check(_c(htu="https://AS.example.com:443/token")).jti == "proof-0001"


def test_a_key_accepted_once_is_checked_again_under_other_algorithms() -> None:
    proof = _proof()
    _check(proof)
    with pytest.raises(InvalidDPoPProof, match="alg must be one of EdDSA"):
        _check(proof, algorithms=("EdDSA",))


def test_kept_proof_keys_are_bounded_and_refused_headers_are_not_kept() -> None:
    for _ in range(_HEADER_CACHE_SIZE + 20):  # as many clients, each with a key of its own
        _check(_proof(key=ec.generate_private_key(ec.SECP256R1())))
    assert _header_key.cache_info().currsize == _HEADER_CACHE_SIZE
    _header_key.cache_clear()
    with pytest.raises(InvalidDPoPProof):
        _check(_private_jwk())
    assert _header_key.cache_info().currsize == 0


def test_the_clock_defaults_to_now() -> None:
    proof = make_proof(KEY, alg="ES256", method="POST", url=URL)
    assert abs(check_proof([proof], method="POST", url=URL).iat - time.time()) < 5
