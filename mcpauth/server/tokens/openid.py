"""OpenID Connect's ID token: what a code exchange whose grant holds ``openid`` returns
(OpenID Connect Core §3.1.3.6), and the claims about the person it and UserInfo carry.

The ID token is signed with the keys published at ``jwks_uri`` (``typ: JWT``, ``aud`` the
client), so neither it nor an access token (``typ: at+jwt``, ``aud`` the resource) passes for
the other. The claims follow the grant's scopes: ``name`` with ``profile``, ``email`` (only a
verified one, with ``email_verified: true``) with ``email``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from mcpauth import jwt
from mcpauth.server.config import Settings
from mcpauth.server.identity import methods
from mcpauth.server.storage import identities
from mcpauth.server.storage.database import Connection, Session

# what the ID token and UserInfo may say, by the scope that asks for it (Core §5.4)
CLAIMS_SUPPORTED = [
    "sub",
    "iss",
    "aud",
    "exp",
    "iat",
    "auth_time",
    "amr",
    "nonce",
    "at_hash",
    "azp",
]
PERSON_CLAIMS_SUPPORTED = ["name", "email", "email_verified"]


def person_claims(unit: Connection | Session, user_id: str, scopes: list[str]) -> dict[str, Any]:
    """The claims about the person the granted ``scopes`` ask for, as the account holds them
    now: ``name`` (``profile``), a verified ``email`` with ``email_verified`` (``email``); a
    claim the account has no value for is left out."""
    if "profile" not in scopes and "email" not in scopes:
        return {}
    found = identities.person(unit, user_id)
    if found is None:
        return {}
    claims: dict[str, Any] = {}
    name = found.name or (found.username if found.local else None)
    if "profile" in scopes and name:
        claims["name"] = name
    if "email" in scopes and found.email and found.email_verified:
        claims.update(email=found.email, email_verified=True)
    return claims


def id_token_claims(
    settings: Settings,
    *,
    subject: str,
    client_id: str,
    auth_time: int,
    nonce: str | None,
    now: int,
    person: dict[str, Any],
    amr: str = "",
) -> dict[str, Any]:
    """Core §2: the ID token's claims; ``amr`` when the sign-in named its methods; ``at_hash``
    is added when the access token is signed."""
    claims: dict[str, Any] = {
        "iss": settings.issuer,
        "sub": subject,
        "aud": client_id,
        "azp": client_id,
        "exp": now + settings.access_token_ttl,
        "iat": now,
        "auth_time": auth_time,
        **person,
    }
    methods_claim = methods.as_claim(amr)
    if methods_claim is not None:
        claims["amr"] = methods_claim
    if nonce is not None:
        claims["nonce"] = nonce  # Core §3.1.2.1: exactly as the authorization request sent it
    return claims


def at_hash(access_token: str, alg: str) -> str:
    """Core §3.1.3.6: the left half of the hash of the access token, base64url; the hash is
    the one of the signing algorithm (SHA-512 for Ed25519)."""
    digest = (hashlib.sha512 if alg == "EdDSA" else hashlib.sha256)(access_token.encode()).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode("ascii")


def sign_id_token(signer: jwt.CompactSigner, claims: dict[str, Any], access_token: str) -> str:
    return signer.sign({**claims, "at_hash": at_hash(access_token, signer.alg)}, typ="JWT")
