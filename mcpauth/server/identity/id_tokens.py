"""ID token validation for sign-in through an upstream OpenID provider (OpenID Connect Core
§3.1.3.7): the signature with a key from the provider's JWKS and an asymmetric algorithm the
provider advertises (never ``none``, never HMAC), a JWT ``typ`` if any, then the claims with
Authlib's ``CodeIDToken``: ``iss`` exactly the provider's, ``aud`` containing mcpauth's client id
(with ``azp`` naming it when there are several audiences), ``exp`` and ``iat`` within a
minute's leeway, ``nonce`` exactly the one sent, ``at_hash`` when present."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry, extract_compact

# asymmetric signature algorithms only: an HMAC key would be the client secret, and a token
# "signed" with a provider's public key as an HMAC secret must never verify
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
ID_TOKEN_TYPES = frozenset({"jwt", "application/jwt"})
MAX_ID_TOKEN_LENGTH = 16 * 1024
MAX_SUBJECT_LENGTH = 255  # OpenID Connect Core §2
LEEWAY = 60


class IDTokenError(Exception):
    """The ID token is refused; ``reason`` says which rule it broke (for logs, never the
    token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownSigningKey(IDTokenError):
    """No key in the provider's JWKS has the token's ``kid`` (a fresh JWKS may have it)."""


def signing_keys(jwks: Mapping[str, Any]) -> KeySet:
    """The provider's public signing keys from its JWKS document: asymmetric keys whose
    ``use`` is ``sig`` or unset; anything else is left out.

    Raises:
        IDTokenError: the document is not a JWKS.
    """
    raw = jwks.get("keys")
    if not isinstance(raw, list):
        raise IDTokenError("jwks_not_a_key_set")
    usable = [
        key
        for key in raw
        if isinstance(key, dict)
        and key.get("kty") in ("RSA", "EC", "OKP")
        and key.get("use", "sig") == "sig"
        and "d" not in key  # a private key published by mistake is not trusted either
    ]
    try:
        return KeySet.import_key_set({"keys": usable})
    except (JoseError, ValueError, TypeError) as exc:
        raise IDTokenError("jwks_unusable") from exc


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
        header = extract_compact(token.encode("ascii")).headers()
    except (JoseError, ValueError, UnicodeError) as exc:
        raise IDTokenError("malformed") from exc
    return dict(header)


def validate_id_token(
    token: str,
    *,
    keys: KeySet,
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
    header = _header(token)
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in ID_TOKEN_TYPES):
        raise IDTokenError("wrong_typ")
    allowed = [alg for alg in algorithms if alg in ASYMMETRIC_ALGORITHMS]
    if header.get("alg") not in allowed:
        raise IDTokenError("algorithm_not_allowed")
    try:
        # header members outside JWS's registry (a provider's own) are allowed, as Authlib
        # allows them; `crit` is still honoured
        registry = JWSRegistry(algorithms=allowed, strict_check_header=False)
        decoded = jwt.decode(token, keys, registry=registry)
    except InvalidKeyIdError as exc:
        raise UnknownSigningKey("unknown_kid") from exc
    except JoseError as exc:
        raise IDTokenError(f"signature_{exc.error}") from exc
    except ValueError as exc:  # no key of the token's type or algorithm in the set
        raise IDTokenError("no_matching_key") from exc
    claims = CodeIDToken(
        decoded.claims,
        decoded.header,
        {
            "iss": {"essential": True, "value": issuer},
            "aud": {"essential": True, "value": client_id},
            "sub": {"essential": True},
            "exp": {"essential": True},
            "iat": {"essential": True},
            "nonce": {"essential": True, "value": nonce},
        },
        {"nonce": nonce, "client_id": client_id, "access_token": access_token},
    )
    try:
        claims.validate(now=now, leeway=leeway)
    except ExpiredTokenError as exc:
        raise IDTokenError("expired") from exc
    except JoseError as exc:
        raise IDTokenError(f"{exc.error}_{getattr(exc, 'claim', '') or 'claims'}") from exc
    subject = decoded.claims.get("sub")
    if not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_SUBJECT_LENGTH:
        raise IDTokenError("invalid_sub")
    return dict(decoded.claims)
