"""Signing keys, JWKS export and RFC 9068 JWT access tokens, on PyJWT.

Shared by the authorization server (signing) and the middleware (verification). Verification
takes its algorithm from the key, never from the token: a key type admits one algorithm, ``none``
and HMAC are never accepted (docs/security.md T15).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import jwt as pyjwt
import orjson
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from mcpauth.errors import InvalidToken

__all__ = [
    "ACCESS_TOKEN_TYPES",
    "ALGORITHMS",
    "UnknownKeyError",
    "VerificationKey",
    "encode",
    "generate_private_key",
    "key_set",
    "private_key_from_pem",
    "private_key_to_pem",
    "public_jwk",
    "thumbprint",
    "unverified_claims",
    "unverified_header",
    "verify",
]

Algorithm = Literal["ES256", "RS256", "EdDSA"]
ALGORITHMS: tuple[Algorithm, ...] = ("ES256", "RS256", "EdDSA")
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey

ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 §4
_EMBEDDED_KEY_HEADERS = ("jwk", "jku", "x5u", "x5c")
_EC_CURVE_ALGS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})  # RFC 7518 §6
MAX_TOKEN_LENGTH = 8192


class UnknownKeyError(InvalidToken):
    """The token names a ``kid`` that is not in the key set (a refetch may find it)."""


def generate_private_key(alg: Algorithm) -> PrivateKey:
    """A new private key for ``alg`` (P-256 for ES256, 2048-bit RSA for RS256, Ed25519)."""
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ed25519.Ed25519PrivateKey.generate()


def private_key_to_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def private_key_from_pem(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise ValueError("unsupported private key type")
    return key


def public_jwk(public_key: PublicKey, *, kid: str, alg: str) -> dict[str, Any]:
    """The public JWK of ``public_key`` with ``kid``, ``alg`` and ``use: sig``."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public_key, as_dict=True)
    elif isinstance(public_key, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public_key, as_dict=True)
    jwk = {k: v for k, v in jwk.items() if k not in PRIVATE_MEMBERS and k != "key_ops"}
    jwk.update(kid=kid, alg=alg, use="sig")
    return jwk


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url)."""
    members = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}
    kty = str(jwk.get("kty"))
    if kty not in members:
        raise ValueError(f"unsupported key type {kty!r}")
    canonical = json.dumps({k: jwk[k] for k in members[kty]}, separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def algorithm_for_jwk(jwk: Mapping[str, Any], wanted: str | None = None) -> str:
    """The one algorithm a verification key admits (never ``none``/HMAC): its ``alg``, else
    the one its type implies (an EC key's curve, RS256, EdDSA). With ``wanted``, that
    algorithm if the key admits it; an RSA key without ``alg`` admits every RSA algorithm.

    Raises:
        ValueError: symmetric or unknown key type, an ``alg`` that does not fit the key, or a
            ``wanted`` algorithm the key does not admit.
    """
    kty = jwk.get("kty")
    declared = jwk.get("alg")
    if kty == "EC":
        alg = _EC_CURVE_ALGS.get(str(jwk.get("crv")))
        if alg is None or declared not in (None, alg):
            raise ValueError("EC key with an unsupported curve or a mismatched alg")
    elif kty == "RSA":
        alg = str(declared or wanted or "RS256")
        if alg not in _RSA_ALGS:
            raise ValueError("RSA key with a non-RSA alg")
    elif kty == "OKP" and jwk.get("crv") == "Ed25519" and declared in (None, "EdDSA", "Ed25519"):
        alg = "EdDSA"
    else:
        raise ValueError(f"unsupported verification key type {kty!r}")
    if wanted is not None and wanted != alg:
        raise ValueError(f"the key admits {alg}, not {wanted}")
    return alg


class VerificationKey:
    """A public key from a JWKS with the single algorithm it admits (``algorithm``: one the
    key admits, for a key that admits several; see :func:`algorithm_for_jwk`).

    Raises:
        ValueError: the key does not admit ``algorithm``, or its type is not supported.
        pyjwt.PyJWKError: the key material is unusable.
    """

    __slots__ = ("algorithm", "key", "kid")

    def __init__(self, jwk: Mapping[str, Any], algorithm: str | None = None) -> None:
        self.algorithm = algorithm_for_jwk(jwk, algorithm)
        self.kid = str(jwk.get("kid", ""))
        self.key = pyjwt.PyJWK(dict(jwk), algorithm=self.algorithm)


KEY_ERRORS = (ValueError, pyjwt.PyJWKError, pyjwt.InvalidKeyError)  # an unusable JWK


def public_signing_jwks(jwks: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The members of a JWKS document that may verify signatures: objects whose ``use`` is
    ``sig`` or unset and that hold no private member (a private key published by mistake is
    trusted no more than any other leaked key)."""
    raw = jwks.get("keys")
    if not isinstance(raw, list):
        return []
    return [
        jwk
        for jwk in raw
        if isinstance(jwk, dict)
        and jwk.get("use", "sig") == "sig"
        and not PRIVATE_MEMBERS.intersection(jwk)
    ]


def key_set(jwks: Mapping[str, Any]) -> dict[str, VerificationKey]:
    """Usable signing keys of a JWKS document by ``kid``; keys without ``kid``, with
    ``use`` other than ``sig``, with private members or of unsupported types are skipped."""
    keys: dict[str, VerificationKey] = {}
    for jwk in public_signing_jwks(jwks):
        if not isinstance(jwk.get("kid"), str):
            continue
        try:
            keys[jwk["kid"]] = VerificationKey(jwk)
        except KEY_ERRORS:
            continue
    return keys


def compact_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson: every token is serialised twice, its claims
    and the response body, and the standard library takes ten times as long)."""
    return orjson.dumps(value)


def _b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


class CompactSigner:
    """Signs claims as compact JWS (RFC 7515 §7.1) with one private key, for the algorithms
    this server signs access tokens with (``ALGORITHMS``).

    The token endpoint signs every access token, and PyJWT's general ``encode`` spends about
    half as long again as the signature itself re-deriving what is fixed per key: the header
    segment (cached here per ``typ``) and the padding and hash objects. The signature comes
    from ``cryptography`` exactly as PyJWT makes it (ES256 as the raw ``r || s`` of RFC 7518
    §3.4), and the tests verify what this signs with PyJWT.
    """

    __slots__ = ("_headers", "_sign", "alg", "kid")

    def __init__(self, key: PrivateKey, *, alg: str, kid: str) -> None:
        self.alg, self.kid = alg, kid
        self._headers: dict[str, bytes] = {}
        if (
            alg == "ES256"
            and isinstance(key, ec.EllipticCurvePrivateKey)
            and isinstance(key.curve, ec.SECP256R1)  # RFC 7518 §3.4: ES256 is P-256 only
        ):
            ecdsa = ec.ECDSA(hashes.SHA256())
            size = 32

            def sign_es(data: bytes) -> bytes:
                r, s = decode_dss_signature(key.sign(data, ecdsa))
                return r.to_bytes(size, "big") + s.to_bytes(size, "big")

            self._sign = sign_es
        elif alg == "RS256" and isinstance(key, rsa.RSAPrivateKey):
            pkcs1, sha256 = padding.PKCS1v15(), hashes.SHA256()
            self._sign = lambda data: key.sign(data, pkcs1, sha256)
        elif alg == "EdDSA" and isinstance(key, ed25519.Ed25519PrivateKey):
            self._sign = key.sign
        else:
            raise ValueError(f"a {type(key).__name__} cannot sign {alg}")

    def _header(self, typ: str) -> bytes:
        header = self._headers.get(typ)
        if header is None:
            fields = {"alg": self.alg, "kid": self.kid, "typ": typ}
            header = _b64url(compact_json(fields))
            if len(self._headers) < 16:  # a handful of fixed types in practice
                self._headers[typ] = header
        return header

    def sign(self, claims: Mapping[str, Any], typ: str = "at+jwt") -> str:
        payload = _b64url(compact_json(claims))
        signing_input = self._header(typ) + b"." + payload
        return (signing_input + b"." + _b64url(self._sign(signing_input))).decode("ascii")


def encode(
    claims: Mapping[str, Any], key: PrivateKey, *, alg: str, kid: str, typ: str = "at+jwt"
) -> str:
    """Sign ``claims`` as a compact JWS with ``kid`` and ``typ`` in the header: the server's
    own algorithms through :class:`CompactSigner`, any other PyJWT algorithm (a client's
    ES384 or PS256 assertion key, say) through PyJWT."""
    if alg in ALGORITHMS:
        return CompactSigner(key, alg=alg, kid=kid).sign(claims, typ)
    return pyjwt.encode(dict(claims), key, algorithm=alg, headers={"kid": kid, "typ": typ})


def unverified_header(token: str, *, max_length: int = MAX_TOKEN_LENGTH) -> dict[str, Any]:
    """The JOSE header, for routing only (which key); never trusted for anything else.

    Raises:
        InvalidToken: not a compact JWS, or longer than ``max_length``.
    """
    if len(token) > max_length:
        raise InvalidToken("The access token is too large")
    try:
        header: dict[str, Any] = pyjwt.get_unverified_header(token)
        return header
    except pyjwt.PyJWTError as exc:
        raise InvalidToken("The access token is malformed") from exc


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a compact JWS, unverified: for routing only (which issuer, which rule),
    never trusted for anything else.

    Raises:
        InvalidToken: not a compact JWS whose payload is a JSON object.
    """
    try:
        claims: dict[str, Any] = pyjwt.decode(token, options={"verify_signature": False})
    except pyjwt.PyJWTError as exc:
        raise InvalidToken("The token is malformed") from exc
    return claims


def _key_for(
    header: Mapping[str, Any], keys: Mapping[str, VerificationKey], typ: Iterable[str] | None
) -> VerificationKey:
    """The verification key a header selects, after the header checks of docs/security.md T15."""
    for name in _EMBEDDED_KEY_HEADERS:
        if name in header:
            raise InvalidToken(f"The access token header must not carry {name!r}")
    if "crit" in header:
        raise InvalidToken("The access token has critical header parameters that are not supported")
    if typ is not None:
        allowed = {t.lower() for t in typ}
        if str(header.get("typ", "")).lower() not in allowed:
            raise InvalidToken("The access token has the wrong type (typ)")
    kid = header.get("kid")
    if not isinstance(kid, str) or kid not in keys:
        raise UnknownKeyError("The access token is signed with an unknown key")
    key = keys[kid]
    if header.get("alg") != key.algorithm:
        raise InvalidToken("The access token's algorithm does not match its key")
    return key


def verify(
    token: str,
    keys: Mapping[str, VerificationKey],
    *,
    issuer: str,
    audience: str | None,
    typ: Iterable[str] | None = ACCESS_TOKEN_TYPES,
    leeway: float = 30.0,
    required: Iterable[str] = ("iss", "exp", "iat", "sub", "client_id", "jti"),
) -> dict[str, Any]:
    """Verify an RFC 9068 access token and return its claims.

    ``audience`` must be among ``aud`` (RFC 9068 §4); pass ``None`` only where the caller checks
    ``aud`` itself. ``typ`` is compared case-insensitively; ``None`` skips the check.

    Raises:
        UnknownKeyError: the ``kid`` is not in ``keys``.
        InvalidToken: anything else wrong, with a description that says what.
    """
    header = unverified_header(token)
    key = _key_for(header, keys, typ)
    required_claims = list(required)
    if audience is not None and "aud" not in required_claims:
        required_claims.append("aud")
    try:
        claims = pyjwt.decode(
            token,
            key.key,
            algorithms=[key.algorithm],
            audience=audience,
            issuer=issuer,
            leeway=leeway,
            options={"require": required_claims, "verify_aud": audience is not None},
        )
    except pyjwt.ExpiredSignatureError as exc:
        raise InvalidToken("The access token has expired") from exc
    except pyjwt.ImmatureSignatureError as exc:
        raise InvalidToken("The access token is not yet valid") from exc
    except pyjwt.InvalidAudienceError as exc:
        raise InvalidToken("The access token was not issued for this resource") from exc
    except pyjwt.InvalidIssuerError as exc:
        raise InvalidToken("The access token was issued by an untrusted issuer") from exc
    except pyjwt.MissingRequiredClaimError as exc:
        raise InvalidToken(f"The access token lacks the {exc.claim!r} claim") from exc
    except pyjwt.InvalidSignatureError as exc:
        raise InvalidToken("The access token signature is invalid") from exc
    except pyjwt.PyJWTError as exc:
        raise InvalidToken("The access token is invalid") from exc
    result: dict[str, Any] = claims
    return result


class InvalidSignature(InvalidToken):
    """The signature does not verify with the key."""


def signed_claims(token: str, key: VerificationKey) -> dict[str, Any]:
    """The claims of a compact JWS whose signature ``key`` verifies, with the key's algorithm
    (the header must name it); no claim is checked: the caller checks every one it needs (an
    ID token's, say, by OpenID Connect Core §3.1.3.7).

    Raises:
        InvalidSignature: the signature does not verify.
        InvalidToken: anything else wrong (the header names another algorithm, the payload is
            not a JSON object).
    """
    try:
        claims: dict[str, Any] = pyjwt.decode(
            token,
            key.key,
            algorithms=[key.algorithm],
            options={
                "verify_signature": True,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
                "verify_sub": False,
                "verify_jti": False,
            },
        )
    except pyjwt.InvalidSignatureError as exc:
        raise InvalidSignature("The token signature is invalid") from exc
    except pyjwt.PyJWTError as exc:
        raise InvalidToken("The token is invalid") from exc
    return claims
