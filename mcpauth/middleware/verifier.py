"""Access-token verification: the :class:`TokenVerifier` extension point and the default
RFC 9068 JWT verifier.

Any authorization server can be plugged in by writing a class with one coroutine::

    class KeycloakIntrospection:
        async def verify_token(self, token: str) -> VerifiedToken:
            data = await my_keycloak_call(token)          # your transport
            if not data.get("active"):
                raise InvalidToken("The access token is not active")
            if RESOURCE not in data.get("aud", []):
                raise InvalidToken("The access token was not issued for this resource")
            return VerifiedToken(
                subject=data["sub"], client_id=data["azp"], scopes=tuple(data["scope"].split()),
                expires_at=data["exp"], issuer=data["iss"], resource=RESOURCE, claims=data,
            )

    ProtectedResourceMiddleware(app, resource=RESOURCE, authorization_servers=[ISSUER],
                                verifier=KeycloakIntrospection())

A verifier MUST check the audience (RFC 8707 §2, MCP RS-09) and raise
:class:`~mcpauth.errors.InvalidToken` for anything it does not accept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jwt as pyjwt

from mcpauth import jwt
from mcpauth.errors import InvalidToken
from mcpauth.middleware.jwks import JWKSCache

__all__ = ["JWTVerifier", "MultiIssuerVerifier", "TokenVerifier", "VerifiedToken", "parse_scope"]

DEFAULT_REQUIRED_CLAIMS = ("iss", "exp", "iat", "sub", "client_id", "jti")


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """What the resource server knows about the caller after verifying a token.

    ``expires_at`` is the token's ``exp`` (seconds since the epoch). ``cache_until`` lets a
    verifier cap how long the middleware may reuse the result (introspection does); the cache
    never keeps an entry past either. A token with neither is never cached.
    """

    subject: str | None
    client_id: str
    scopes: tuple[str, ...]
    expires_at: int | None
    issuer: str | None
    resource: str
    claims: Mapping[str, Any] = field(default_factory=dict)
    cache_until: float | None = None

    @property
    def principal(self) -> tuple[str | None, str | None, str]:
        """``(issuer, subject, client_id)``: whom a session or state handle is bound to."""
        return (self.issuer, self.subject, self.client_id)


@runtime_checkable
class TokenVerifier(Protocol):
    """Turns a bearer token into a :class:`VerifiedToken` (see the module docstring)."""

    async def verify_token(self, token: str) -> VerifiedToken:
        """Verify ``token`` for this resource.

        Raises:
            InvalidToken: the token is not acceptable here (401).
            TemporarilyUnavailable: the verifier cannot decide right now (503).
        """
        ...


def parse_scope(value: Any) -> tuple[str, ...]:
    """Scopes from an RFC 9068 ``scope`` string (or a list, as some servers send).

    Raises:
        InvalidToken: the claim is neither a string nor a list of strings.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(dict.fromkeys(value.split()))
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(dict.fromkeys(value))
    raise InvalidToken("The access token has a malformed scope claim")


class JWTVerifier:
    """RFC 9068 JWT access tokens signed by one authorization server.

    Keys come only from the server's JWKS (docs/security.md T15); the algorithm comes from the key;
    ``aud`` must contain ``resource`` and there is no switch to turn that off (RFC 8707 §2).
    """

    def __init__(
        self,
        *,
        issuer: str,
        resource: str,
        keys: JWKSCache,
        typ: Iterable[str] | None = jwt.ACCESS_TOKEN_TYPES,
        leeway: float = 30.0,
        required_claims: Sequence[str] = DEFAULT_REQUIRED_CLAIMS,
    ) -> None:
        self.issuer = issuer
        self.resource = resource
        self.keys = keys
        self.typ = None if typ is None else frozenset(typ)
        self.leeway = leeway
        self.required_claims = tuple(required_claims)

    async def verify_token(self, token: str) -> VerifiedToken:
        """Verify signature, type, issuer, audience, lifetime and required claims.

        Raises:
            InvalidToken: any check fails.
            TemporarilyUnavailable: the JWKS cannot be fetched and none is cached.
        """
        keys = await self.keys.keys()
        try:
            claims = self._verify(token, keys)
        except jwt.UnknownKeyError:
            refreshed = await self.keys.refresh_for_unknown_kid()
            if refreshed is None:
                raise
            claims = self._verify(token, refreshed)
        return self._to_verified(claims)

    def _verify(self, token: str, keys: Mapping[str, jwt.VerificationKey]) -> dict[str, Any]:
        try:
            return jwt.verify(
                token,
                keys,
                issuer=self.issuer,
                # RFC 8707 §2 / MCP RS-09: the audience check is always on.
                audience=self.resource,
                typ=self.typ,
                leeway=self.leeway,
                required=self.required_claims,
            )
        except pyjwt.PyJWTError as exc:  # e.g. an unsupported ``crit`` seen while parsing
            raise InvalidToken("The access token is invalid") from exc

    def _to_verified(self, claims: dict[str, Any]) -> VerifiedToken:
        client_id = claims.get("client_id")
        subject = claims.get("sub")
        if not isinstance(client_id, str) or not isinstance(subject, str | None):
            raise InvalidToken("The access token has a malformed client_id or sub claim")
        exp = claims.get("exp")
        return VerifiedToken(
            subject=subject,
            client_id=client_id,
            scopes=parse_scope(claims.get("scope")),
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            issuer=self.issuer,
            resource=self.resource,
            claims=claims,
        )


class MultiIssuerVerifier:
    """Routes a JWT to the verifier of the issuer named in its (unverified) ``iss`` claim.

    The claim only picks the verifier; that verifier then checks ``iss`` exactly.
    """

    def __init__(self, verifiers: Mapping[str, TokenVerifier]) -> None:
        self.verifiers = dict(verifiers)

    async def verify_token(self, token: str) -> VerifiedToken:
        """Verify with the verifier for the token's issuer.

        Raises:
            InvalidToken: malformed token or an issuer that is not trusted here.
        """
        try:
            jwt.unverified_header(token)
            unverified = pyjwt.decode(token, options={"verify_signature": False})
        except pyjwt.PyJWTError as exc:
            raise InvalidToken("The access token is malformed") from exc
        verifier = self.verifiers.get(str(unverified.get("iss")))
        if verifier is None:
            raise InvalidToken("The access token was issued by an untrusted issuer")
        return await verifier.verify_token(token)
