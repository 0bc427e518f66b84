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

The MCP Python SDK's ``TokenVerifier`` has the same method name and another contract (it
returns the SDK's ``AccessToken`` or ``None``). Where an mcpauth verifier is expected, one
recognisably written for the SDK is refused at construction with a ``TypeError``
(:func:`require_token_verifier`); wrap it in :class:`~mcpauth.middleware.FromSDK`.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

import httpx2

from mcpauth import jwt
from mcpauth.errors import InvalidToken
from mcpauth.middleware._http import AsyncClosing
from mcpauth.middleware.jwks import JWKSCache
from mcpauth.oauth import parse_scope

__all__ = [
    "JWTVerifier",
    "MultiIssuerVerifier",
    "TokenVerifier",
    "VerifiedToken",
    "require_token_verifier",
    "scope_claim",
]

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


_SDK_RESULT = re.compile(r"\bAccessToken\b")


def _names_access_token(annotation: Any) -> bool:
    """Whether a return annotation (resolved, or its source text) names an ``AccessToken``."""
    if isinstance(annotation, str):
        return _SDK_RESULT.search(annotation) is not None
    if getattr(annotation, "__name__", None) == "AccessToken":
        return True
    return any(_names_access_token(arg) for arg in typing.get_args(annotation))


def _is_sdk_verifier(verifier: object, method: Any) -> bool:
    """An MCP SDK verifier: the SDK's ``TokenVerifier`` protocol among its classes, or a
    ``verify_token`` annotated to return the SDK's ``AccessToken`` (``AccessToken | None``)."""
    for cls in type(verifier).__mro__:
        if cls.__module__.split(".")[0] == "mcp" and cls.__name__.endswith("TokenVerifier"):
            return True
    try:
        hints = typing.get_type_hints(method)
    except (NameError, TypeError, AttributeError, SyntaxError):  # names imported for typing only
        hints = dict(getattr(method, "__annotations__", None) or {})
    return _names_access_token(hints.get("return"))


def require_token_verifier(verifier: Any, where: str) -> TokenVerifier:
    """``verifier``, after checking it can be an mcpauth :class:`TokenVerifier`.

    Raises:
        TypeError: it has no ``verify_token``, or it is a verifier for the MCP SDK (wrap that
            in :class:`~mcpauth.middleware.FromSDK`); ``where`` names the place it was given.
    """
    method = getattr(verifier, "verify_token", None)
    if not callable(method):
        raise TypeError(
            f"{where} needs a token verifier (an object with async verify_token(token) -> "
            f"VerifiedToken), not {type(verifier).__name__}"
        )
    if _is_sdk_verifier(verifier, method):
        raise TypeError(
            f"{where} needs an mcpauth verifier, and {type(verifier).__name__} is one for the "
            "MCP SDK (verify_token returns AccessToken | None): pass "
            "FromSDK(verifier, resource=...) from mcpauth.middleware instead"
        )
    checked: TokenVerifier = verifier
    return checked


class KeyCacheOptions(TypedDict, total=False):
    """The keywords of :class:`~mcpauth.middleware.JWKSCache` a :class:`JWTVerifier` passes on
    (their defaults are the cache's)."""

    min_refresh_interval: float
    default_cache_seconds: float
    max_cache_seconds: float
    failure_backoff: float
    max_failure_backoff: float
    fetch_timeout: float
    clock: Callable[[], float] | None


def scope_claim(value: Any) -> tuple[str, ...]:
    """Scopes from an RFC 9068 ``scope`` string (or a list, as some servers send).

    Raises:
        InvalidToken: the claim is neither a string nor a list of strings.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(parse_scope(value))
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(dict.fromkeys(value))
    raise InvalidToken("The access token has a malformed scope claim")


class JWTVerifier(AsyncClosing):
    """RFC 9068 JWT access tokens signed by one authorization server, for one resource.

    ``audience`` is this resource server's URI: ``aud`` must contain it, and there is no switch
    to turn that off (RFC 8707 §2). Keys come only from the issuer's JWKS (docs/security.md
    T15), at ``jwks_uri`` or where the issuer's metadata says; the algorithm comes from the key.
    ``http`` is yours to close; without it the verifier creates a client on its first fetch and
    closes it in :meth:`aclose` (or ``async with``). ``key_cache`` keywords
    (:class:`KeyCacheOptions`) tune the key cache (:class:`~mcpauth.middleware.JWKSCache`, kept
    as :attr:`keys`).

    Raises:
        TypeError: ``audience`` is empty.
    """

    def __init__(
        self,
        issuer: str,
        audience: str,
        jwks_uri: str | None = None,
        http: httpx2.AsyncClient | None = None,
        *,
        typ: Iterable[str] | None = jwt.ACCESS_TOKEN_TYPES,
        leeway: float = 30.0,
        required_claims: Sequence[str] = DEFAULT_REQUIRED_CLAIMS,
        **key_cache: Unpack[KeyCacheOptions],
    ) -> None:
        if not audience:
            raise TypeError("JWTVerifier needs the audience: this resource server's URI")
        self.issuer = issuer
        self.audience = audience
        self.typ = None if typ is None else frozenset(typ)
        self.leeway = leeway
        self.required_claims = tuple(required_claims)
        self.keys = JWKSCache(issuer, http=http, jwks_uri=jwks_uri, **key_cache)

    @property
    def resource(self) -> str:
        """The resource this verifier accepts tokens for (its ``audience``)."""
        return self.audience

    async def aclose(self) -> None:
        """Close the HTTP client the verifier created, if any (a given ``http`` stays open)."""
        await self.keys.aclose()

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
        # every PyJWT error (an unsupported ``crit`` seen while parsing, say) comes out of
        # jwt.verify as an InvalidToken
        return jwt.verify(
            token,
            keys,
            issuer=self.issuer,
            # RFC 8707 §2 / MCP RS-09: the audience check is always on.
            audience=self.audience,
            typ=self.typ,
            leeway=self.leeway,
            required=self.required_claims,
        )

    def _to_verified(self, claims: dict[str, Any]) -> VerifiedToken:
        client_id = claims.get("client_id")
        subject = claims.get("sub")
        if not isinstance(client_id, str) or not isinstance(subject, str | None):
            raise InvalidToken("The access token has a malformed client_id or sub claim")
        exp = claims.get("exp")
        return VerifiedToken(
            subject=subject,
            client_id=client_id,
            scopes=scope_claim(claims.get("scope")),
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            issuer=self.issuer,
            resource=self.audience,
            claims=claims,
        )


class MultiIssuerVerifier(AsyncClosing):
    """Routes a JWT to the verifier of the issuer named in its (unverified) ``iss`` claim.

    The claim only picks the verifier; that verifier then checks ``iss`` exactly. :meth:`aclose`
    (or ``async with``) closes the verifiers it routes to.

    Raises:
        TypeError: one of ``verifiers`` is not an mcpauth verifier (an MCP SDK verifier goes
            through :class:`~mcpauth.middleware.FromSDK`).
    """

    def __init__(self, verifiers: Mapping[str, TokenVerifier]) -> None:
        self.verifiers = {
            issuer: require_token_verifier(verifier, f"MultiIssuerVerifier ({issuer})")
            for issuer, verifier in verifiers.items()
        }

    async def aclose(self) -> None:
        """Close every verifier that can be closed."""
        for verifier in self.verifiers.values():
            close = getattr(verifier, "aclose", None)
            if close is not None:
                await close()

    async def verify_token(self, token: str) -> VerifiedToken:
        """Verify with the verifier for the token's issuer.

        Raises:
            InvalidToken: malformed token or an issuer that is not trusted here.
        """
        jwt.unverified_header(token)
        try:
            unverified = jwt.unverified_claims(token)
        except InvalidToken as exc:
            raise InvalidToken("The access token is malformed") from exc
        verifier = self.verifiers.get(str(unverified.get("iss")))
        if verifier is None:
            raise InvalidToken("The access token was issued by an untrusted issuer")
        return await verifier.verify_token(token)
