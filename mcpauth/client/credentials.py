"""Client credentials and token endpoint client authentication (RFC 6749 §2.3, RFC 7523 §2.2)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mcpauth.client.errors import RegistrationError
from mcpauth.oauth import CLIENT_ASSERTION_TYPE, SECRET_METHODS, basic_authorization

if TYPE_CHECKING:  # PyJWT is imported when an assertion is signed (not for a stored token)
    from mcpauth import jwt as jose

ASSERTION_LIFETIME = 60  # seconds; RFC 7523 §3: short-lived


@dataclass(frozen=True)
class ClientCredentials:
    """A client ID and how to authenticate with it at the token endpoint.

    ``auth_method`` is ``none``, ``client_secret_basic``, ``client_secret_post`` or
    ``private_key_jwt``; left out, it follows from what is given: ``private_key_jwt`` with a
    ``private_key``, ``client_secret_basic`` with a ``client_secret``, else ``none``. For
    ``private_key_jwt`` the assertion (RFC 7523 §2.2) is signed with ``signing_alg`` and carries
    ``key_id`` as ``kid``, or the key's RFC 7638 thumbprint when ``key_id`` is not set.
    ``issuer`` binds the credentials to one authorization server (MCP 2026-07-28 "Authorization
    Server Binding"): they are refused anywhere else; ``None`` means unbound (bound to the first
    server that uses them) or portable (a CIMD URL). ``source`` records where they came from;
    ``grant_types``, for a client this library registered, the grants it registered for (empty:
    not known).
    """

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    auth_method: str | None = None
    private_key: jose.PrivateKey | None = field(default=None, repr=False)
    signing_alg: str = "ES256"
    key_id: str | None = None
    issuer: str | None = None
    source: str = "preregistered"  # preregistered | cimd | dcr
    grant_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.auth_method is None:
            inferred = (
                "private_key_jwt"
                if self.private_key is not None
                else "client_secret_basic"
                if self.client_secret
                else "none"
            )
            object.__setattr__(self, "auth_method", inferred)
        if self.auth_method == "private_key_jwt" and self.private_key is None:
            raise RegistrationError("private_key_jwt needs a private key")
        if self.auth_method in SECRET_METHODS and not self.client_secret:
            raise RegistrationError(f"{self.auth_method} needs a client secret")

    def bound_to(self, issuer: str) -> ClientCredentials:
        return replace(self, issuer=issuer)

    def to_json(self) -> dict[str, Any]:
        """The stored form (never holds a private key)."""
        return {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "auth_method": self.auth_method,
            "issuer": self.issuer,
            "source": self.source,
            "grant_types": list(self.grant_types),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientCredentials:
        return cls(
            client_id=data["client_id"],
            client_secret=data.get("client_secret"),
            auth_method=data.get("auth_method", "none"),
            issuer=data.get("issuer"),
            source=data.get("source", "dcr"),
            grant_types=tuple(data.get("grant_types") or ()),
        )


def client_assertion(
    credentials: ClientCredentials, audience: str, *, now: float | None = None
) -> str:
    """An RFC 7523 §3 client assertion: ``iss`` = ``sub`` = client_id, ``aud``, ``jti``, ``exp``.

    Raises:
        RegistrationError: the credentials carry no private key.
    """
    from mcpauth import jwt as jose

    if credentials.private_key is None:
        raise RegistrationError("private_key_jwt needs a private key")
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": credentials.client_id,
        "sub": credentials.client_id,
        "aud": audience,
        "jti": secrets.token_urlsafe(16),
        "iat": issued,
        "exp": issued + ASSERTION_LIFETIME,
    }
    key, alg = credentials.private_key, credentials.signing_alg
    kid = credentials.key_id or jose.thumbprint(jose.public_jwk(key.public_key(), kid="", alg=alg))
    return jose.encode(claims, key, alg=alg, kid=kid, typ="JWT")


def authenticate(
    credentials: ClientCredentials,
    form: dict[str, str],
    *,
    audience: str,
    now: float | None = None,
) -> dict[str, str]:
    """Add client authentication to a token request ``form``; return extra headers."""
    method = credentials.auth_method
    if method == "client_secret_basic" and credentials.client_secret:
        return {
            "authorization": basic_authorization(credentials.client_id, credentials.client_secret)
        }
    if method == "private_key_jwt":
        # RFC 7523 §2.2: the assertion identifies the client; client_id in the body is optional.
        form["client_assertion_type"] = CLIENT_ASSERTION_TYPE
        form["client_assertion"] = client_assertion(credentials, audience, now=now)
        return {}
    if credentials.client_id:  # a workload's platform token names its client itself
        form["client_id"] = credentials.client_id
    if method == "client_secret_post" and credentials.client_secret:
        form["client_secret"] = credentials.client_secret
    return {}
