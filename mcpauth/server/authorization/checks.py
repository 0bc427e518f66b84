"""Single checks of the authorization and token requests, each with the rule it enforces."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mcpauth import oauth
from mcpauth.errors import InvalidGrant, InvalidRequest, InvalidScope, InvalidTarget
from mcpauth.oauth import IDENTITY_SCOPES, OFFLINE_ACCESS, s256, same_secret
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.operations.size_limits import MAX_SCOPES
from mcpauth.server.storage.models import Client, Resource
from mcpauth.uris import URIError, canonical_resource, without_trailing_slash

# RFC 7636 §4.2: BASE64URL(SHA256(verifier)) is exactly 43 characters
S256_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")
# RFC 7636 §4.1: code_verifier = 43*128unreserved
CODE_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
# OpenID Connect Core §5.4: who the person is, answered with an ID token and userinfo
OPENID = "openid"
# scopes of the authorization server itself, never a resource's
RESERVED_SCOPES = frozenset({OFFLINE_ACCESS, *IDENTITY_SCOPES})
_THUMBPRINT = re.compile(r"[A-Za-z0-9_-]{43}")


def check_code_challenge(challenge: str | None, method: str | None) -> str:
    """PKCE is required for every client, S256 only (OAuth 2.1 §4.1.1, MCP; docs/security.md T4).

    Raises:
        InvalidRequest: missing, not S256, or malformed.
    """
    if not challenge:
        raise InvalidRequest("code_challenge is required (PKCE with S256)")
    if method != "S256":
        raise InvalidRequest("code_challenge_method must be S256")
    if not S256_CHALLENGE.match(challenge):
        raise InvalidRequest("code_challenge must be 43 base64url characters (S256)")
    return challenge


def check_code_verifier(verifier: str | None, challenge: str) -> None:
    """RFC 7636 §4.6, compared in constant time.

    Raises:
        InvalidRequest: the verifier is missing or malformed.
        InvalidGrant: it does not match the challenge.
    """
    if not verifier:
        raise InvalidRequest("code_verifier is required")
    if not CODE_VERIFIER.match(verifier):
        raise InvalidRequest("code_verifier must be 43 to 128 unreserved characters")
    if not same_secret(s256(verifier), challenge):
        raise InvalidGrant("code_verifier does not match the code_challenge")


def check_dpop_jkt(value: str | None) -> str | None:
    """``dpop_jkt`` of an authorization request (RFC 9449 §10): the RFC 7638 thumbprint of the
    key the code will be redeemed with, a base64url SHA-256 digest (43 characters).

    Raises:
        InvalidRequest: anything else.
    """
    if value is None:
        return None
    if not _THUMBPRINT.fullmatch(value):
        raise InvalidRequest(
            "dpop_jkt must be the base64url SHA-256 JWK thumbprint (RFC 7638) of the DPoP key"
        )
    return value


def resolve_resource(resources: Resources, requested: str | None) -> Resource:
    """The registered resource a request targets (RFC 8707 §2); the default one if omitted.

    Raises:
        InvalidTarget: not a valid URI, not registered, or omitted with no default.
    """
    if requested is None:
        resource = resources.default
        if resource is None:
            raise InvalidTarget("resource is required: this server has no default resource")
        return resource
    try:
        canonical = canonical_resource(requested)
    except URIError as exc:
        raise InvalidTarget(f"resource: {exc}") from exc
    resource = resources.find(canonical)  # RFC 8707 §2: compared in canonical form
    if resource is None:
        raise InvalidTarget(f"resource {canonical} is not served by this authorization server")
    return resource


def machine_scopes(resource: Resource, client: Client) -> list[str]:
    """The scopes a token without a user gets when the request names none that can be
    granted: the resource's default scopes the client may have, else every scope of the
    resource it may have."""
    allowed = (
        set(oauth.parse_scope(client.scope)) if client.scope is not None else set(resource.scopes)
    )
    return [s for s in resource.default_scopes if s in allowed] or [
        s for s in resource.scopes if s in allowed
    ]


def scopes_without_refresh(
    requested: list[str] | None, resource: Resource, client: Client
) -> list[str]:
    """The scopes of a token that comes without a refresh token and names no person (a
    machine's own, or an exchanged one): the resource's scopes asked for, else
    :func:`machine_scopes`. ``offline_access``, the OpenID scopes and scopes the resource does
    not offer are narrowed away (RFC 6749 §3.3), as at the authorization endpoint.

    Raises:
        InvalidScope: a scope of the resource the client may not have, or none of the
            resource's scopes is one the client may have.
    """
    own = [s for s in requested or [] if s in resource.scopes]
    if own:
        _check_allowed(own, client)
        return own
    fallback = machine_scopes(resource, client)
    if not fallback and resource.scopes:
        # narrowing must never turn "none of this resource's scopes" into a token for it
        raise InvalidScope(f"the client may have no scope of {resource.uri}")
    return fallback


def check_same_resource(requested: str | None, granted: str, difference: str) -> None:
    """A token request's optional ``resource`` names the resource already granted (RFC 8707
    §2.2: a code, refresh token or assertion is bound to it); ``difference`` says how not.
    Absent, it means the granted one (clients omit it on refresh); compared in canonical form,
    a trailing slash aside. The token is for the granted resource whatever the spelling.

    Raises:
        InvalidTarget: not a valid URI, or another resource.
    """
    if requested is None:
        return
    try:
        canonical = canonical_resource(requested)
    except URIError as exc:
        raise InvalidTarget(f"resource: {exc}") from exc
    if canonical != granted and without_trailing_slash(canonical) != without_trailing_slash(
        granted
    ):
        raise InvalidTarget(difference)


def parse_scope(value: str | None) -> list[str] | None:
    """The scope parameter as an ordered list of distinct tokens (None when absent).

    Raises:
        InvalidScope: malformed or too many scopes.
    """
    if value is None:
        return None
    try:
        scopes = oauth.parse_scope(value, strict=True)
    except oauth.MalformedScope as exc:
        raise InvalidScope(f"scope {exc}") from exc
    if len(scopes) > MAX_SCOPES:
        raise InvalidScope(f"at most {MAX_SCOPES} scopes may be requested")
    return scopes


@dataclass(frozen=True)
class GrantedScopes:
    """What an authorization request is granted: the resource's scopes (the access token's
    ``scope``), the OpenID scopes (an ID token and userinfo) and ``offline_access``."""

    resource: list[str]
    identity: list[str]
    offline: bool

    @property
    def granted(self) -> list[str]:
        """The grant's scope string as it is kept: the resource's scopes, then the OpenID
        ones (``offline_access`` is kept apart, as a refresh token)."""
        return [*self.resource, *self.identity]


def _check_allowed(scopes: list[str], client: Client) -> None:
    # An administrator's scope list binds; a self-registered client's `scope` (RFC 7591) is
    # what it expected to need at registration, and MCP clients step up beyond it later: for
    # those the user's consent is the gate.
    if client.scope is not None and client.source == "admin":
        allowed = set(oauth.parse_scope(client.scope))
        refused = [s for s in scopes if s not in allowed]
        if refused:
            raise InvalidScope(f"the client may not request: {' '.join(refused)}")


def _within_list(scopes: Iterable[str], client: Client) -> list[str]:
    """``scopes`` less those an administrator's list for the client withholds."""
    if client.scope is not None and client.source == "admin":
        allowed = set(oauth.parse_scope(client.scope))
        return [s for s in scopes if s in allowed]
    return list(scopes)


def identity_scopes(requested: Iterable[str]) -> list[str]:
    """The OpenID scopes among ``requested``: ``profile`` and ``email`` only with ``openid``
    (OpenID Connect Core §3.1.2.1: without it the request is no OpenID request)."""
    requested = list(requested)
    if OPENID not in requested:
        return []
    return [s for s in requested if s in IDENTITY_SCOPES]


def resolve_scopes(
    requested: list[str] | None,
    resource: Resource,
    client: Client,
    *,
    offline_enabled: bool,
    openid: bool = True,
) -> GrantedScopes:
    """The scopes to grant. What the server cannot grant is narrowed away, never refused
    (RFC 6749 §3.3): scopes the resource does not offer, ``offline_access`` when the operator
    has not turned it on, the OpenID scopes when ``openid`` is false. When none of the
    resource's scopes remains (or none was asked for), the resource's default scopes.

    Raises:
        InvalidScope: a scope of the resource that an administrator's list for the client
            does not include.
    """
    requested = requested or []
    own = [s for s in requested if s in resource.scopes]
    if own:
        _check_allowed(own, client)
    else:
        own = _within_list(resource.default_scopes, client)
    return GrantedScopes(
        resource=own,
        identity=_within_list(identity_scopes(requested), client) if openid else [],
        offline=offline_enabled and OFFLINE_ACCESS in requested,
    )


def narrower_scopes(
    requested: list[str] | None, granted: Iterable[str], resource: Resource | None
) -> list[str]:
    """The scopes of a refreshed token: the grant's, or the part of them the request names
    (RFC 6749 §6). What the server would have narrowed away at the authorization endpoint is
    ignored here too (``offline_access``, scopes the resource does not offer); when nothing
    else is named, the whole grant.

    Raises:
        InvalidScope: a scope the server could grant but this grant does not hold (a refresh
            never widens a grant).
    """
    granted = list(granted)
    grantable = {*(resource.scopes if resource is not None else ()), *IDENTITY_SCOPES}
    named = [s for s in requested or [] if s in granted or s in grantable]
    extra = [s for s in named if s not in granted]
    if extra:
        raise InvalidScope(f"scopes beyond the original grant: {' '.join(extra)}")
    return named or granted
