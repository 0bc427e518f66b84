"""ID token validation for sign-in through an upstream OpenID provider (OpenID Connect Core
§3.1.3.7), on :mod:`mcpauth.jwt`: the signature with a key from the provider's JWKS and an
asymmetric algorithm the provider advertises (never ``none``, never HMAC), a JWT ``typ`` if any,
then the claims: ``iss`` exactly the provider's, ``aud`` containing mcpauth's client id (with
``azp`` naming it when there are several audiences), ``exp`` and ``iat`` within a minute's
leeway, ``nbf`` if any, ``nonce`` exactly the one sent, ``at_hash`` when present."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from mcpauth import jwt
from mcpauth.errors import InvalidToken
from mcpauth.oauth import same_secret

# asymmetric signature algorithms only: an HMAC key would be the client secret, and a token
# "signed" with a provider's public key as an HMAC secret must never verify
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
ID_TOKEN_TYPES = frozenset({"jwt", "application/jwt"})
MAX_ID_TOKEN_LENGTH = 16 * 1024
MAX_SUBJECT_LENGTH = 255  # OpenID Connect Core §2
LEEWAY = 60
ESSENTIAL = ("iss", "sub", "aud", "exp", "iat")  # OpenID Connect Core §2


class IDTokenError(Exception):
    """The ID token is refused; ``reason`` says which rule it broke (for logs, never the
    token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownSigningKey(IDTokenError):
    """No key in the provider's JWKS has the token's ``kid`` (a fresh JWKS may have it)."""


class ProviderKeys:
    """A provider's public signing keys: the JWKs that may verify a signature, each usable
    (``kid in keys`` says whether one has that ``kid``)."""

    __slots__ = ("jwks",)

    def __init__(self, jwks: Collection[Mapping[str, Any]]) -> None:
        self.jwks = tuple(jwks)

    def __contains__(self, kid: object) -> bool:
        return any(jwk.get("kid") == kid for jwk in self.jwks)

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.jwks)

    def __len__(self) -> int:
        return len(self.jwks)

    def key_for(self, kid: str | None, alg: str) -> jwt.VerificationKey:
        """The key a token names, for ``alg``: the one with its ``kid`` (the only key, when
        the token names none and the provider publishes one) that admits ``alg``.

        Raises:
            UnknownSigningKey: no such key.
        """
        candidates: tuple[Mapping[str, Any], ...]
        if kid is None:
            candidates = self.jwks if len(self.jwks) == 1 else ()
        else:
            candidates = tuple(jwk for jwk in self.jwks if jwk.get("kid") == kid)
        for jwk in candidates:
            try:
                return jwt.VerificationKey(jwk, alg)
            except jwt.KEY_ERRORS:
                continue
        raise UnknownSigningKey("unknown_kid")


def signing_keys(jwks: Mapping[str, Any]) -> ProviderKeys:
    """The provider's public signing keys from its JWKS document: asymmetric keys whose
    ``use`` is ``sig`` or unset, holding no private member; anything else is left out.

    Raises:
        IDTokenError: the document is not a JWKS, or holds no usable key.
    """
    if not isinstance(jwks.get("keys"), list):
        raise IDTokenError("jwks_not_a_key_set")
    usable = []
    for jwk in jwt.public_signing_jwks(jwks):
        try:
            jwt.VerificationKey(jwk)
        except jwt.KEY_ERRORS:
            continue
        usable.append(jwk)
    if not usable:
        raise IDTokenError("jwks_unusable")
    return ProviderKeys(usable)


def allowed_algorithms(advertised: Collection[str] | None) -> list[str]:
    """The algorithms an ID token may be signed with: those the provider advertises
    (``RS256`` when it says nothing, OpenID Connect Discovery §3) that are asymmetric."""
    chosen = [alg for alg in (advertised or ["RS256"]) if alg in ASYMMETRIC_ALGORITHMS]
    return sorted(set(chosen))


def _header(token: str) -> dict[str, Any]:
    if not isinstance(token, str) or not token or len(token) > MAX_ID_TOKEN_LENGTH:
        raise IDTokenError("malformed")
    if token.count(".") != 2:  # a JWE (five parts) or anything else
        raise IDTokenError("malformed")
    try:
        return jwt.unverified_header(token, max_length=MAX_ID_TOKEN_LENGTH)
    except InvalidToken as exc:
        raise IDTokenError("malformed") from exc


def _signed_claims(token: str, keys: ProviderKeys, algorithms: Collection[str]) -> dict[str, Any]:
    """The claims, once the header passes and the signature verifies with the provider's key.

    Raises:
        UnknownSigningKey: no key of the token's ``kid`` admits its algorithm.
        IDTokenError: any other rule is broken.
    """
    header = _header(token)
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in ID_TOKEN_TYPES):
        raise IDTokenError("wrong_typ")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS or alg not in algorithms:
        raise IDTokenError("algorithm_not_allowed")
    if "crit" in header:  # RFC 7515 §4.1.11: no extension is understood here
        raise IDTokenError("signature_unsupported_crit")
    key = keys.key_for(header.get("kid"), alg)
    try:
        return jwt.signed_claims(token, key)
    except jwt.InvalidSignature as exc:
        raise IDTokenError("signature_bad_signature") from exc
    except InvalidToken as exc:
        raise IDTokenError("signature_invalid") from exc


def _half_hash(value: str, alg: str) -> str:
    """OpenID Connect Core §3.1.3.6: the left half of the hash of ``alg`` (SHA-512 for
    EdDSA), base64url."""
    size = "512" if alg == "EdDSA" else alg[2:]
    digest = hashlib.new(f"sha{size}", value.encode()).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode()


def _is_time(value: object) -> bool:
    """A NumericDate: a JSON number (a finite one; never a boolean)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _check(
    claims: Mapping[str, Any], name: str, rule: Callable[[Any], bool], *, blank: bool = False
) -> None:
    """A claim that is present must pass ``rule``; a blank one (``""``, ``[]``) only passes
    where ``blank`` allows it."""
    if name not in claims:
        return
    value = claims[name]
    if value in (None, "", [], {}):
        if blank:
            return
        raise IDTokenError(f"invalid_claim_{name}")
    if not rule(value):
        raise IDTokenError(f"invalid_claim_{name}")


def _is_string(value: object) -> bool:
    return isinstance(value, str)


def _names_client(client_id: str) -> Callable[[Any], bool]:
    """``aud`` names the client: it is the client id, or a list of strings holding it."""

    def rule(value: Any) -> bool:
        if isinstance(value, list):
            return all(isinstance(item, str) for item in value) and client_id in value
        return bool(value == client_id)

    return rule


def _check_claims(
    claims: Mapping[str, Any],
    *,
    issuer: str,
    client_id: str,
    nonce: str,
    now: int,
    leeway: int,
) -> None:
    missing = [name for name in (*ESSENTIAL, "nonce") if claims.get(name) is None]
    if missing:
        raise IDTokenError(f"missing_claim_{missing[0]}")
    _check(claims, "iss", lambda value: value == issuer)
    _check(claims, "sub", _is_string)
    _check(claims, "aud", _names_client(client_id))
    _check(claims, "jti", _is_string, blank=True)
    exp = claims["exp"]
    if not _is_time(exp):
        raise IDTokenError("invalid_claim_exp")
    if exp <= now - leeway:
        raise IDTokenError("expired")
    _check(claims, "iat", lambda value: _is_time(value) and value <= now + leeway)
    _check(claims, "nbf", lambda value: _is_time(value) and value <= now + leeway)
    _check(claims, "nonce", lambda value: _is_string(value) and same_secret(nonce, value))
    _check(claims, "auth_time", _is_time, blank=True)
    _check(claims, "amr", lambda value: isinstance(value, list), blank=True)
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if audiences != [client_id] and not claims.get("azp"):
        raise IDTokenError("missing_claim_azp")  # several audiences: azp names the client
    _check(claims, "azp", lambda value: value == client_id, blank=True)


def validate_id_token(
    token: str,
    *,
    keys: ProviderKeys,
    issuer: str,
    client_id: str,
    nonce: str,
    algorithms: Collection[str],
    now: int,
    access_token: str | None = None,
    leeway: int = LEEWAY,
) -> dict[str, Any]:
    """The claims of a valid ID token from the token endpoint of ``issuer``.

    Raises:
        UnknownSigningKey: its ``kid`` is not among ``keys``.
        IDTokenError: any other rule is broken.
    """
    claims = _signed_claims(token, keys, algorithms)
    _check_claims(claims, issuer=issuer, client_id=client_id, nonce=nonce, now=now, leeway=leeway)
    at_hash = claims.get("at_hash")
    if at_hash and access_token:
        alg = str(_header(token)["alg"])
        if not isinstance(at_hash, str) or not same_secret(at_hash, _half_hash(access_token, alg)):
            raise IDTokenError("invalid_claim_at_hash")
    subject = claims["sub"]
    if not subject.strip() or len(subject) > MAX_SUBJECT_LENGTH:
        raise IDTokenError("invalid_sub")
    return claims
