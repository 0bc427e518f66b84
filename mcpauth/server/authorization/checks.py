"""Single checks of the authorization and token requests, each with the rule it enforces."""

from __future__ import annotations

import re
from collections.abc import Iterable

from mcpauth.errors import InvalidGrant, InvalidRequest, InvalidScope, InvalidTarget
from mcpauth.oauth import SCOPE_TOKEN, s256, same_secret
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.operations.size_limits import MAX_SCOPES
from mcpauth.server.storage.models import Client, Resource
from mcpauth.uris import URIError, canonical_resource, without_trailing_slash

# RFC 7636 §4.2: BASE64URL(SHA256(verifier)) is exactly 43 characters
S256_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")
# RFC 7636 §4.1: code_verifier = 43*128unreserved
CODE_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
OFFLINE_ACCESS = "offline_access"
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
    """The scopes a token without a user gets when the request names none: the resource's
    default scopes the client may have, else every scope of the resource it may have."""
    allowed = set(client.scope.split()) if client.scope is not None else set(resource.scopes)
    return [s for s in resource.default_scopes if s in allowed] or [
        s for s in resource.scopes if s in allowed
    ]


def scopes_without_refresh(
    requested: list[str] | None,
    resource: Resource,
    client: Client,
    refused: str = "offline_access makes no sense without a user",
) -> list[str]:
    """The scopes of a token that comes without a refresh token (a machine's own, or an
    exchanged one): those asked for, else :func:`machine_scopes`.

    Raises:
        InvalidScope: ``offline_access`` among them (``refused`` says why), or a scope unknown
            for the resource or not allowed for the client.
    """
    if requested is None:
        requested = machine_scopes(resource, client)
    if OFFLINE_ACCESS in requested:
        raise InvalidScope(refused)
    scopes, _ = resolve_scopes(requested, resource, client, offline_enabled=False)
    return scopes


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
    if without_trailing_slash(canonical) != without_trailing_slash(granted):
        raise InvalidTarget(difference)


def parse_scope(value: str | None) -> list[str] | None:
    """The scope parameter as an ordered list of distinct tokens (None when absent).

    Raises:
        InvalidScope: malformed or too many scopes.
    """
    if value is None:
        return None
    scopes = list(dict.fromkeys(s for s in value.split(" ") if s))
    if len(scopes) > MAX_SCOPES:
        raise InvalidScope(f"at most {MAX_SCOPES} scopes may be requested")
    for scope in scopes:
        if not SCOPE_TOKEN.match(scope):
            raise InvalidScope("scope must be space-separated scope tokens")
    return scopes


def resolve_scopes(
    requested: list[str] | None, resource: Resource, client: Client, *, offline_enabled: bool
) -> tuple[list[str], bool]:
    """The scopes to grant and whether ``offline_access`` was asked for; omitted → the
    resource's default scopes.

    Raises:
        InvalidScope: a scope is unknown for the resource or not allowed for the client.
    """
    scopes = list(resource.default_scopes) if requested is None else list(requested)
    offline = OFFLINE_ACCESS in scopes
    if offline:
        if not offline_enabled:
            raise InvalidScope("offline_access is not offered by this server")
        scopes.remove(OFFLINE_ACCESS)
    unknown = [s for s in scopes if s not in resource.scopes]
    if unknown:
        raise InvalidScope(f"unknown scope for {resource.uri}: {' '.join(unknown)}")
    # An administrator's scope list binds; a self-registered client's `scope` (RFC 7591) is
    # what it expected to need at registration, and MCP clients step up beyond it later: for
    # those the user's consent is the gate.
    if client.scope is not None and client.source == "admin":
        allowed = set(client.scope.split())
        refused = [s for s in scopes if s not in allowed]
        if refused:
            raise InvalidScope(f"the client may not request: {' '.join(refused)}")
    return scopes, offline


def narrower_scopes(requested: list[str] | None, granted: Iterable[str]) -> list[str]:
    """A refresh request may narrow the scopes, never widen them (RFC 6749 §6).

    Raises:
        InvalidScope: a requested scope was not granted.
    """
    granted = list(granted)
    if requested is None:
        return granted
    extra = [s for s in requested if s not in granted and s != OFFLINE_ACCESS]
    if extra:
        raise InvalidScope(f"scopes beyond the original grant: {' '.join(extra)}")
    return [s for s in requested if s != OFFLINE_ACCESS]
